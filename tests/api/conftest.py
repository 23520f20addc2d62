"""Shared set-up of the IO API conformance suite: one connected pair per backend."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import netio

#: Every in-process pairing the suite runs unchanged (the lab adds verbs pairings);
#: "soft-poll" is the soft backend with ``progress="poll"`` (the waiting thread drives it).
BACKENDS = ("tcp", "soft", "soft-poll")
_soft_hosts = itertools.count(10)


@dataclass
class Pair:
    client: netio.Context
    server: netio.Context
    ep: netio.Endpoint  # the client's endpoint
    peer: netio.Endpoint  # the server's endpoint
    listener: netio.Listener


def soft_addresses() -> tuple[str, str]:
    """Two fresh loopback addresses (each soft context owns UDP 4791 on its own)."""
    n = next(_soft_hosts) % 250
    return f"127.0.{n}.1", f"127.0.{n}.2"


def open_pair_contexts(backend: str, **options: Any) -> tuple[netio.Context, netio.Context,
                                                              str]:
    if backend == "soft-poll":
        backend = "soft"
        options = {**options, "progress": "poll"}
    if backend == "soft":
        server_ip, client_ip = soft_addresses()
        return (netio.open("soft", local_addr=server_ip, **options),
                netio.open("soft", local_addr=client_ip, **options), server_ip)
    return netio.open(backend, **options), netio.open(backend, **options), "127.0.0.1"


@asynccontextmanager
async def connected(backend: str, **options: Any) -> AsyncIterator[Pair]:
    server, client, host = open_pair_contexts(backend, **options)
    try:
        listener = await server.listen(f"{host}:0")
        accepted = listener.accept(timeout_s=10)
        ep = await client.connect(f"{host}:{listener.address[1]}")
        peer = await accepted
        yield Pair(client, server, ep, peer, listener)
    finally:
        await client.aclose()
        await server.aclose()


def run(backend: str, scenario: Callable[[Pair], Awaitable[None]], **options: Any) -> None:
    async def main() -> None:
        async with connected(backend, **options) as pair:
            await asyncio.wait_for(scenario(pair), 60)

    asyncio.run(main())
