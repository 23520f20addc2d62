"""A closed soft context gives its UDP port 4791 back within the linger bound, whether or
not the event loop it ran on outlives it.

Closing an RC QP keeps it answering the peer's retransmissions for as long as the peer
retries: (retry_cnt + 1) ACK timeouts of 4.096 µs · 2^timeout (IBTA §9.7.6.1.3), at most
2 s in netio. After that the address's port 4791 must be free again: another process (a
perftest peer, a second netio run) binds it next. ``asyncio.run`` closes its loop at once
and a synchronous context's private loop stops when it closes, so the release must not
depend on that loop still running.
"""

from __future__ import annotations

import asyncio
import socket
import time

import netio

#: the linger cap (2 s) plus scheduling slack on a loaded machine
RELEASE_BOUND_S = 2.0 + 1.5


def _port_frees(ip: str, bound_s: float) -> bool:
    deadline = time.monotonic() + bound_s
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind((ip, 4791))
                return True
            except OSError:
                if time.monotonic() > deadline:
                    return False
        time.sleep(0.05)


async def _exchange(server: netio.Context, client: netio.Context, host: str) -> None:
    listener = await server.listen(f"{host}:0")
    accepted = listener.accept(timeout_s=10)
    ep = await client.connect(f"{host}:{listener.address[1]}")
    peer = await accepted
    inbox = bytearray(8)
    got = peer.recv(server.register(inbox))
    await ep.send(client.register(bytearray(b"ping")))
    await got
    assert inbox[:4] == b"ping"


def test_port_freed_after_asyncio_run_ends() -> None:
    server_ip, client_ip = "127.1.251.1", "127.1.251.2"

    async def main() -> None:
        server = netio.open("soft", local_addr=server_ip)
        client = netio.open("soft", local_addr=client_ip)
        try:
            await _exchange(server, client, server_ip)
        finally:
            await client.aclose()
            await server.aclose()

    asyncio.run(main())
    assert _port_frees(server_ip, RELEASE_BOUND_S), f"{server_ip}:4791 still bound"
    assert _port_frees(client_ip, RELEASE_BOUND_S), f"{client_ip}:4791 still bound"


def test_port_freed_after_synchronous_contexts_close() -> None:
    server_ip, client_ip = "127.1.252.1", "127.1.252.2"
    server = netio.open("soft", local_addr=server_ip)
    client = netio.open("soft", local_addr=client_ip)
    with server, client:
        listener = server.listen(f"{server_ip}:0").wait(5)
        accepted = listener.accept(timeout_s=10)
        ep = client.connect(f"{server_ip}:{listener.address[1]}").wait(10)
        peer = accepted.wait(10)
        inbox = bytearray(8)
        got = peer.recv(server.register(inbox))
        ep.send(client.register(bytearray(b"ping"))).wait(10)
        got.wait(10)
    assert _port_frees(server_ip, RELEASE_BOUND_S), f"{server_ip}:4791 still bound"
    assert _port_frees(client_ip, RELEASE_BOUND_S), f"{client_ip}:4791 still bound"
