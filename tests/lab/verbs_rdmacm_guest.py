"""netio's rdma_cm connections (``cm="rdma_cm"``, verbs backend) inside a lab guest.

Run by tests/lab/test_lab_rdmacm.py in the rxe guests, one role per process:

    server IP PORT            netio listener: SEND its region's descriptor, take the
                              client's WRITE and SEND with immediate, see the peer leave;
                              then a second connection, which the server leaves first
    client IP PORT            netio client of that listener (first: an address nobody
                              answers ARP for, and IP:PORT+1, where nothing listens)
    rping-client IP PORT N    netio client of the kernel tools' ``rping -s`` (N pings)
    rping-server IP PORT N    netio listener for ``rping -c`` (N pings)

rping's protocol (librdmacm/examples/rping.c): the client SENDs a 16-byte buffer
advertisement (big-endian u64 address, u32 rkey, u32 size) for its start buffer; the
server RDMA-READs it and SENDs a 16-byte go-ahead; the client advertises its sink
buffer; the server RDMA-WRITEs what it read there and SENDs a go-ahead; repeat. The
ping text is rping's: ``rdma-ping-N: `` then ASCII from 'A' + N cycling to 'z', ending
in a zero byte.

Prints ``CHECK ok|FAIL what`` lines and ``PING text`` lines; exit 0 when no check failed.
"""

from __future__ import annotations

import struct
import sys
import time

import netio
from netio.api.region import DESCRIPTOR_BYTES, RemoteRegion

TIMEOUT_S = 30.0
DONE_IMM = 0xC0FFEE
WRITE_BYTES = 8192
RPING_BYTES = 64
ADV = struct.Struct(">QII")  # struct rping_rdma_info
failed = 0


def check(ok: bool, what: str) -> None:
    global failed
    print(f"CHECK {'ok' if ok else 'FAIL'} {what}", flush=True)
    failed += not ok


def pattern(n: int) -> bytes:
    return bytes((i * 7 + 3) % 251 for i in range(n))


def rping_text(ping: int, size: int) -> bytes:
    """What rping's client puts in its start buffer for ping number ``ping``."""
    head = f"rdma-ping-{ping}: ".encode()
    body = bytearray(head)
    c = 65 + ping % 58
    while len(body) < size:
        body.append(c)
        c = 65 if c >= 122 else c + 1
    body[size - 1] = 0
    return bytes(body)


def server(ip: str, port: int) -> int:
    with netio.open("verbs", timeout_s=TIMEOUT_S) as ctx:
        listener = ctx.listen(f"{ip}:{port}", cm="rdma_cm").wait(TIMEOUT_S)
        print("READY", flush=True)
        ep = listener.accept(timeout_s=120).wait(130)
        print(f"PATH {ep.path.text()}", flush=True)
        target = bytearray(WRITE_BYTES)
        region = ctx.register(target)
        inbox = bytearray(16)
        done = ep.recv(ctx.register(inbox))
        ep.send(ctx.register(bytearray(region.descriptor()))).wait(TIMEOUT_S)
        c = done.wait(TIMEOUT_S)
        check(c.imm_data == DONE_IMM and bytes(inbox[:c.byte_len]) == b"done",
              f"SEND with immediate from the client: {bytes(inbox[:c.byte_len])!r} imm "
              f"{c.imm_data:#x}")
        check(bytes(target) == pattern(WRITE_BYTES),
              f"the client's {WRITE_BYTES}-byte WRITE landed in place")
        deadline = time.monotonic() + 20
        while not ep.peer_closed and time.monotonic() < deadline:
            time.sleep(0.1)
        check(ep.peer_closed, "the client's disconnect (RDMA_CM_EVENT_DISCONNECTED) reached "
                              "the endpoint: peer_closed")
        print(f"COUNTERS {ep.counters().get('cm_peer_disconnected')}", flush=True)
        # a second connection on the same listener; this time the server leaves first
        ep2 = listener.accept(timeout_s=60).wait(70)
        ep2.send(ctx.register(bytearray(b"bye"))).wait(TIMEOUT_S)
        ep2.close()
        check(True, "a second connection on the listener: SEND, then close")
    return 1 if failed else 0


def client(ip: str, port: int) -> int:
    absent = ip.rsplit(".", 1)[0] + ".99"  # nothing answers ARP there in the lab
    with netio.open("verbs", timeout_s=1.0) as ctx:
        t0 = time.monotonic()
        try:
            ctx.connect(f"{absent}:{port}", cm="rdma_cm").wait(10)
            check(False, f"a connection to {absent}, where no host is, failed")
        except (netio.Timeout, netio.ConnectFailed) as exc:
            took_s = time.monotonic() - t0
            print(f"ABSENT {type(exc).__name__} {exc} ({took_s:.1f} s)", flush=True)
            named = (isinstance(exc, netio.Timeout) and exc.step ==
                     f"rdma_cm resolve address ({absent}:{port})") or (
                     "address resolution failed" in str(exc))
            check(named and took_s < 5, "a host that does not answer ARP: the address "
                                        "resolution step fails within timeout_s 1 s")
    with netio.open("verbs", timeout_s=TIMEOUT_S) as ctx:
        try:
            ctx.connect(f"{ip}:{port + 1}", cm="rdma_cm").wait(TIMEOUT_S + 5)
            check(False, "a connection to a port without a listener was refused")
        except netio.ConnectFailed as exc:
            print(f"REFUSED {exc}", flush=True)
            check("rejected" in str(exc) and f"{ip}:{port + 1}" in str(exc),
                  "a connection to a port without a listener: ConnectFailed naming the peer")
        deadline = time.monotonic() + 120
        while True:  # the server may still be starting
            try:
                ep = ctx.connect(f"{ip}:{port}", cm="rdma_cm").wait(TIMEOUT_S + 5)
                break
            except netio.ConnectFailed:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        print(f"PATH {ep.path.text()}", flush=True)
        print(f"MTU {ep.path.mtu_bytes}", flush=True)
        inbox = bytearray(DESCRIPTOR_BYTES)
        ep.recv(ctx.register(inbox)).wait(TIMEOUT_S)
        remote = RemoteRegion.from_descriptor(inbox)
        check(remote.length == WRITE_BYTES, f"the server's descriptor by SEND: "
                                            f"{remote.length} bytes")
        source = bytearray(pattern(WRITE_BYTES))
        ep.write(ctx.register(source), remote.whole()).wait(TIMEOUT_S)
        ep.send(ctx.register(bytearray(b"done")), imm=DONE_IMM).wait(TIMEOUT_S)
        check(True, "WRITE and SEND with immediate completed")
        ep.close()
        ep = ctx.connect(f"{ip}:{port}", cm="rdma_cm").wait(TIMEOUT_S + 5)
        bye = bytearray(16)
        c = ep.recv(ctx.register(bye)).wait(TIMEOUT_S)
        check(bytes(bye[:c.byte_len]) == b"bye", "a second connection: the server's SEND")
        deadline = time.monotonic() + 20
        while not ep.peer_closed and time.monotonic() < deadline:
            time.sleep(0.1)
        check(ep.peer_closed, "the server's disconnect reached the client's endpoint")
        target = RemoteRegion(0x1000, 1, 8, "rocev2")  # the peer is gone: never acked
        try:
            ep.write(ctx.register(bytearray(8)), target.whole()).wait(TIMEOUT_S)
            check(False, "a WRITE after the server left failed")
        except netio.OperationError as exc:
            print(f"AFTER {exc}", flush=True)
            check("peer gone" in str(exc), "a WRITE after the server left: the error says "
                                           "the peer is gone")
    return 1 if failed else 0


def rping_client(ip: str, port: int, count: int) -> int:
    """netio as rping's client against ``rping -s``."""
    with netio.open("verbs", timeout_s=TIMEOUT_S) as ctx:
        deadline = time.monotonic() + 120
        while True:
            try:
                ep = ctx.connect(f"{ip}:{port}", cm="rdma_cm").wait(TIMEOUT_S + 5)
                break
            except netio.ConnectFailed:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        print(f"PATH {ep.path.text()}", flush=True)
        start = bytearray(RPING_BYTES)
        sink = bytearray(RPING_BYTES)
        start_r, sink_r = ctx.register(start), ctx.register(sink)
        adv = bytearray(ADV.size)
        adv_r = ctx.register(adv)
        go = bytearray(ADV.size)
        go_r = ctx.register(go)
        for ping in range(count):
            start[:] = rping_text(ping, RPING_BYTES)
            sink[:] = bytes(RPING_BYTES)
            print(f"PING {start[:-1].decode()}", flush=True)
            got = ep.recv(go_r)
            adv[:] = ADV.pack(start_r.addr, start_r.rkey, RPING_BYTES)
            ep.send(adv_r).wait(TIMEOUT_S)
            check(got.wait(TIMEOUT_S).byte_len == ADV.size, f"ping {ping}: go-ahead after "
                                                            f"rping's READ")
            got = ep.recv(go_r)
            adv[:] = ADV.pack(sink_r.addr, sink_r.rkey, RPING_BYTES)
            ep.send(adv_r).wait(TIMEOUT_S)
            got.wait(TIMEOUT_S)
            check(bytes(sink) == bytes(start), f"ping {ping}: rping -s wrote back the "
                                               f"{RPING_BYTES} bytes it read")
    return 1 if failed else 0


def rping_server(ip: str, port: int, count: int) -> int:
    """netio as rping's server for ``rping -c``."""
    with netio.open("verbs", timeout_s=TIMEOUT_S) as ctx:
        listener = ctx.listen(f"{ip}:{port}", cm="rdma_cm").wait(TIMEOUT_S)
        print("READY", flush=True)
        ep = listener.accept(timeout_s=120).wait(130)
        print(f"PATH {ep.path.text()}", flush=True)
        adv = bytearray(ADV.size)
        adv_r = ctx.register(adv)
        go_r = ctx.register(bytearray(ADV.size))
        buf = bytearray(RPING_BYTES)
        buf_r = ctx.register(buf)
        got = ep.recv(adv_r)
        for ping in range(count):
            c = got.wait(TIMEOUT_S)
            addr, rkey, size = ADV.unpack(adv)
            check(c.byte_len == ADV.size and size == RPING_BYTES,
                  f"ping {ping}: rping's start advertisement ({size} bytes)")
            got = ep.recv(adv_r)
            ep.read(buf_r, RemoteRegion(addr, rkey, size, "rocev2").whole()).wait(TIMEOUT_S)
            text = bytes(buf).split(bytes(1), 1)[0].decode()
            print(f"PING {text}", flush=True)
            ep.send(go_r).wait(TIMEOUT_S)
            c = got.wait(TIMEOUT_S)
            addr, rkey, size = ADV.unpack(adv)
            got = ep.recv(adv_r)
            ep.write(buf_r, RemoteRegion(addr, rkey, size, "rocev2").whole()).wait(TIMEOUT_S)
            ep.send(go_r).wait(TIMEOUT_S)
        deadline = time.monotonic() + 20
        while not ep.peer_closed and time.monotonic() < deadline:
            time.sleep(0.1)
        check(ep.peer_closed, "rping -c's disconnect reached the endpoint: peer_closed")
    return 1 if failed else 0


def main() -> int:
    role, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "server":
        return server(ip, port)
    if role == "client":
        return client(ip, port)
    count = int(sys.argv[4])
    if role == "rping-client":
        return rping_client(ip, port, count)
    return rping_server(ip, port, count)


if __name__ == "__main__":
    sys.exit(main())
