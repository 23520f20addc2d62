"""RDMA WRITE into a numpy array in another process, then see what a vanished peer says.

    python examples/write_into_numpy.py                 # both roles, soft backend
    python examples/write_into_numpy.py --backend tcp   # the same over TCP
    python examples/write_into_numpy.py server --backend verbs --listen 10.77.0.10:7471
    python examples/write_into_numpy.py client --backend verbs --connect 10.77.0.10:7471

The server registers a numpy array and sends its descriptor to the client with a
SEND; the client RDMA-WRITEs into it and says "done" with a SEND carrying immediate
data; the server checks that the bytes landed in its array, in place, and exits; the
client's next WRITE then fails with a clear error naming the peer. Exit code 0 when
every step did what it should.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import numpy as np

import netio

ARRAY_BYTES = 4 << 20
DONE_IMM = 0x600D


def _open(backend: str, local_addr: str | None) -> netio.Context:
    # the soft backend binds UDP 4791 on its address: two processes on one host need two
    options = {"local_addr": local_addr} if backend == "soft" and local_addr else {}
    return netio.open(backend, **options)


def server(backend: str, listen: str, local_addr: str | None) -> int:
    with _open(backend, local_addr) as ctx:
        target = np.zeros(ARRAY_BYTES, dtype=np.uint8)
        region = ctx.register(target)  # in place: the backend sees target's own bytes
        listener = ctx.listen(listen).wait(10)
        print(f"server: listening on {listener.address[0]}:{listener.address[1]}", flush=True)
        ep = listener.accept(timeout_s=60).wait(60)
        print(f"server: connected ({ep.path.text()})", flush=True)
        done = ep.recv(ctx.register(bytearray(16)))
        ep.send(ctx.register(bytearray(region.descriptor()))).wait(10)
        completion = done.wait(60)
        expect = np.arange(ARRAY_BYTES, dtype=np.uint64).astype(np.uint8)
        landed = bool(np.array_equal(target, expect))
        print(f"server: client says done (imm {completion.imm_data:#x}); the array "
              f"{'holds' if landed else 'DOES NOT hold'} the {ARRAY_BYTES} written bytes",
              flush=True)
        return 0 if landed and completion.imm_data == DONE_IMM else 1


def client(backend: str, connect: str, local_addr: str | None) -> int:
    with _open(backend, local_addr) as ctx:
        ep = ctx.connect(connect).wait(30)
        inbox = bytearray(netio.api.region.DESCRIPTOR_BYTES)
        ctx_recv = ep.recv(ctx.register(inbox))
        ctx_recv.wait(30)
        remote = netio.RemoteRegion.from_descriptor(inbox)
        source = np.arange(ARRAY_BYTES, dtype=np.uint64).astype(np.uint8)
        local = ctx.register(source)
        t0 = time.perf_counter()
        ep.write(local, remote.whole()).wait(60)
        took_s = time.perf_counter() - t0
        print(f"client: wrote {ARRAY_BYTES} bytes in {took_s * 1e3:.1f} ms "
              f"({ARRAY_BYTES * 8 / took_s / 1e9:.2f} Gb/s)", flush=True)
        ep.send(ctx.register(bytearray(b"done")), imm=DONE_IMM).wait(30)
        deadline = time.monotonic() + 60
        while not ep.peer_closed and time.monotonic() < deadline:
            time.sleep(0.05)  # the server checks its array and exits (its connection closes)
        try:
            ep.write(local[0:4096], remote[0:4096]).wait(30)
        except netio.OperationError as exc:
            print(f"client: after the server left: {exc}", flush=True)
            return 0
        print("client: a WRITE to a departed peer succeeded?", flush=True)
        return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", nargs="?", choices=("both", "server", "client"),
                        default="both")
    parser.add_argument("--backend", default="soft", choices=netio.BACKENDS)
    parser.add_argument("--listen", default="127.0.0.1:7471")
    parser.add_argument("--connect", default="127.0.0.1:7471")
    parser.add_argument("--local-addr", default=None,
                        help="local IP (soft: each process on one host needs its own)")
    args = parser.parse_args(argv)
    try:
        if args.role == "server":
            return server(args.backend, args.listen, args.local_addr or
                          args.listen.rpartition(":")[0])
        if args.role == "client":
            return client(args.backend, args.connect, args.local_addr)
        peer = subprocess.Popen([sys.executable, __file__, "server", "--backend",
                                 args.backend, "--listen", args.listen], stdout=subprocess.PIPE,
                                text=True)
        assert peer.stdout is not None
        print(peer.stdout.readline(), end="", flush=True)  # listening: the client may go
        code = client(args.backend, args.connect, args.local_addr or "127.0.0.2")
        for line in peer.stdout:
            print(line, end="", flush=True)
        return code or peer.wait(30)
    except netio.NetioError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
