"""One side of a soft (host) <-> verbs (guest, kernel rxe) check through the public API.

    python verbs_soft_peer.py server BACKEND HOST:PORT [LOCAL_ADDR]
    python verbs_soft_peer.py client BACKEND HOST:PORT [LOCAL_ADDR]

The server registers a numpy array and sends its descriptor to the client in a SEND;
the client WRITEs into it (with and without immediate data), READs from it, runs both
atomics and SENDs with immediate data; the server checks its array in place. Prints
``CHECK ok|FAIL`` lines and exits 0 when every check passed. Run by
tests/lab/test_lab_verbs_backend.py with the soft side on the host (in the lab's network
namespace) and the verbs side in a guest, in both roles.
"""

from __future__ import annotations

import asyncio
import struct
import sys
from typing import Any

import numpy as np

import netio

FAILED: list[str] = []
SIZE = 3 * 1024 + 5  # several 1024-byte MTUs
ATOM = 2 * SIZE + 6  # 8-byte aligned offset (numpy arrays are at least 8-byte aligned)


def check(name: str, ok: bool, detail: Any = "") -> None:
    print(f"CHECK {'ok' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        FAILED.append(name)


def pattern(seed: int, n: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.int64) * 13 + seed) % 256).astype(np.uint8)


def open_ctx(backend: str, local: str | None) -> netio.Context:
    return netio.open(backend, local_addr=local, timeout_s=30) if local else netio.open(
        backend, timeout_s=30)


async def server(backend: str, host: str, port: int, local: str | None) -> None:
    async with open_ctx(backend, local) as ctx:
        print(ctx.describe().text(), flush=True)
        target = np.zeros(ATOM + 64, dtype=np.uint8)
        target[SIZE:2 * SIZE] = pattern(9, SIZE)
        target[ATOM:ATOM + 8] = np.frombuffer(struct.pack("<Q", 40), dtype=np.uint8)
        region = ctx.register(target, netio.Access.LOCAL_WRITE | netio.Access.REMOTE_WRITE
                              | netio.Access.REMOTE_READ | netio.Access.REMOTE_ATOMIC)
        listener = await ctx.listen(f"{host}:{port}")
        print("LISTENING", flush=True)
        ep = await listener.accept(timeout_s=120)
        inbox = bytearray(SIZE)
        inbox_r = ctx.register(inbox)
        got_imm = ep.recv(inbox_r)
        got_wimm = ep.recv(ctx.register(bytearray(8)))
        got_done = ep.recv(ctx.register(bytearray(8)))
        desc = region.descriptor()
        await ep.send(ctx.register(bytearray(desc)))
        c = await got_imm
        check(f"{backend} server: SEND_WITH_IMM arrives with imm 0xCAFEF00D",
              c.imm_data == 0xCAFEF00D and c.byte_len == SIZE
              and bytes(inbox) == bytes(pattern(3, SIZE)), c)
        c = await got_wimm
        check(f"{backend} server: WRITE_WITH_IMM consumes a receive with imm 0x01020304",
              c.imm_data == 0x01020304 and int(c.opcode) == 129, c)
        await got_done
        check(f"{backend} server: WRITE lands in the numpy array in place",
              bytes(target[:SIZE]) == bytes(pattern(5, SIZE)))
        check(f"{backend} server: fetch_add 2 then compare_swap(42 -> 7) leave 7",
              struct.unpack("<Q", target[ATOM:ATOM + 8].tobytes())[0] == 7)
        await ep.aclose()


async def client(backend: str, host: str, port: int, local: str | None) -> None:
    async with open_ctx(backend, local) as ctx:
        print(ctx.describe().text(), flush=True)
        ep = None
        for _ in range(100):
            try:
                ep = await ctx.connect(f"{host}:{port}")
                break
            except netio.ConnectFailed:
                await asyncio.sleep(0.3)
        assert ep is not None
        dbuf = bytearray(256)
        c = await ep.recv(ctx.register(dbuf))
        remote = netio.RemoteRegion.from_descriptor(bytes(dbuf[:c.byte_len]))
        src = pattern(3, SIZE)
        await ep.send(ctx.register(src), imm=0xCAFEF00D)
        wsrc = pattern(5, SIZE)
        await ep.write(ctx.register(wsrc), remote[0:SIZE])
        tail = wsrc[SIZE - 4:].copy()  # the same last 4 bytes again, now with immediate data
        await ep.write(ctx.register(tail), remote[SIZE - 4:SIZE], imm=0x01020304)
        back = bytearray(SIZE)
        await ep.read(ctx.register(back), remote[SIZE:2 * SIZE])
        check(f"{backend} client: READ brings the server's bytes",
              bytes(back) == bytes(pattern(9, SIZE)))
        old = await ep.fetch_add(ctx.register(bytearray(8)), remote[ATOM:ATOM + 8], 2)
        check(f"{backend} client: fetch_add returns 40", old == 40, old)
        old = await ep.compare_swap(ctx.register(bytearray(8)),
                                    remote[ATOM:ATOM + 8], 42, 7)
        check(f"{backend} client: compare_swap returns 42", old == 42, old)
        await ep.send(ctx.register(bytearray(8)))
        await asyncio.sleep(0.5)
        await ep.aclose()


def main() -> int:
    role, backend, addr = sys.argv[1], sys.argv[2], sys.argv[3]
    local = sys.argv[4] if len(sys.argv) > 4 else None
    host, port = addr.rsplit(":", 1)
    try:
        coro = (server if role == "server" else client)(backend, host, int(port), local)
        asyncio.run(asyncio.wait_for(coro, 240))
    except Exception as exc:
        import traceback

        traceback.print_exc()
        check(f"{role} ({backend}) ran to the end", False, f"{type(exc).__name__}: {exc}")
    print(f"SUMMARY {role} failed={len(FAILED)} {FAILED}", flush=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
