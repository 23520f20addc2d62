"""One side of the verbs backend checks, run inside an rxe lab guest (real kernel rxe).

    python3 verbs_guest.py server|client PEER_IP CTRL_PORT

Drives ``netio.backends.verbs`` through the Backend/BackendQp interface directly; the
two sides exchange QP addresses and region descriptors as JSON lines over a TCP
connection of their own. Prints one ``CHECK ok|FAIL name: detail`` line per check, a
``FIGURE name value`` line per measurement, and exits 0 when every check passed.
tests/lab/test_lab_verbs_backend.py runs it in two guests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import mmap
import os
import resource
import struct
import sys
import time
from typing import Any

import numpy as np

from netio.api.types import Access, Completion, WcFlags, WcOpcode, WcStatus, WrOpcode
from netio.backends.base import QpAddress, QpOptions, RecvRequest, Segment, SendRequest
from netio.backends.verbs import VerbsBackend, VerbsQp
from netio.errors import DeviceNotFound, RegistrationError, RegistrationLimit, RoceError

ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
MIB = 1 << 20
SEND_SIZES = [0, 1, 32, 1024, 10 * 1024 + 7, MIB]  # 0 B, 1 B, inline, one MTU, many, 1 MiB
INLINE_SIZE = 32
WRITE_SIZES = [0, 1, 32, 1024, 10 * 1024 + 7, MIB]
READ_BASE = 2 * MIB  # the server fills target[READ_BASE:][:READ_SPAN] with i % 251
READ_SPAN = MIB + 4096
BIG_BASE = READ_BASE + READ_SPAN  # where the 1 MiB throughput WRITEs go
FAILED: list[str] = []


def check(name: str, ok: bool, detail: Any = "") -> None:
    print(f"CHECK {'ok' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        FAILED.append(name)


def figure(name: str, value: float) -> None:
    print(f"FIGURE {name} {value:.6g}", flush=True)


def pattern(seed: int, n: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.int64) * 7 + seed) % 256).astype(np.uint8)


class Ctrl:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, obj: Any) -> None:
        self.writer.write(json.dumps(obj).encode() + b"\n")
        await self.writer.drain()

    async def recv(self) -> Any:
        line = await asyncio.wait_for(self.reader.readline(), 120)
        if not line:
            raise ConnectionError("control connection closed")
        return json.loads(line)


class Side:
    """A QP with a notify-driven completion collector."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.qp: VerbsQp | None = None
        self.got: list[Completion] = []
        self.notifies = 0

    def notify(self) -> None:
        self.notifies += 1
        self.event.set()

    async def take(self, n: int, timeout_s: float = 60.0) -> list[Completion]:
        assert self.qp is not None
        deadline = time.monotonic() + timeout_s
        while len(self.got) < n:
            self.event.clear()
            self.got.extend(self.qp.poll(64))
            if len(self.got) >= n:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(self.event.wait(), left)
            except TimeoutError:
                break
        out, self.got = self.got[:n], self.got[n:]
        return out


async def make_pair(backend: VerbsBackend, ctrl: Ctrl, local_ip: str,
                    options: QpOptions | None = None) -> Side:
    side = Side()
    side.qp = await backend.create_qp(local_ip, options or QpOptions(), side.notify)
    await ctrl.send(dataclasses.asdict(side.qp.address()))
    remote = QpAddress(**await ctrl.recv())
    mtu = min(remote.mtu_bytes, side.qp.address().mtu_bytes)
    await side.qp.connect(remote, mtu, None)  # type: ignore[arg-type]
    await ctrl.send("connected")
    assert await ctrl.recv() == "connected"
    return side


def seg(region: Any, offset: int, length: int) -> Segment:
    return Segment(region, offset, length)


def desc(region: Any) -> dict[str, int]:
    return {"addr": region.addr, "rkey": region.rkey, "length": region.length}


# -- server -------------------------------------------------------------------------------

async def server(peer: str, port: int) -> None:
    backend = VerbsBackend(peer_ip=peer)
    d = backend.describe()
    print("DESCRIBE " + json.dumps({"device": d.device, "port": d.port,
                                    "gid_index": d.gid_index, "gid": d.gid,
                                    "netdev": d.netdev, "mtu_bytes": d.mtu_bytes,
                                    "text": d.text()}), flush=True)
    local_checks(backend)
    target = np.zeros(BIG_BASE + MIB + 64, dtype=np.uint8)
    target[READ_BASE:READ_BASE + READ_SPAN] = (np.arange(READ_SPAN) % 251).astype(np.uint8)
    target[0:8] = np.frombuffer(struct.pack("<Q", 1000), dtype=np.uint8)
    t_reg = backend.register(memoryview(target), ALL)
    ro = bytearray(4096)
    ro[:5] = b"ro-ok"
    r_ro = backend.register(memoryview(ro), Access.REMOTE_READ)
    rxbuf = mmap.mmap(-1, 10 * MIB)
    r_rx = backend.register(memoryview(rxbuf), Access.LOCAL_WRITE)
    sg_rx = bytearray(100)
    r_sg = backend.register(memoryview(sg_rx), Access.LOCAL_WRITE)

    srv = await asyncio.start_server(lambda r, w: conns.put_nowait((r, w)), "0.0.0.0", port)
    conns: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    print("LISTENING", flush=True)
    reader, writer = await asyncio.wait_for(conns.get(), 120)
    ctrl = Ctrl(reader, writer)
    local_ip = writer.get_extra_info("sockname")[0]

    # receives first (the QP is in INIT after create_qp: posting before connect works)
    side = Side()
    side.qp = await backend.create_qp(local_ip, QpOptions(), side.notify)
    recvs = [RecvRequest(100 + i, (seg(r_rx, i * MIB, MIB),)) for i in range(len(SEND_SIZES))]
    recvs.append(RecvRequest(200, (seg(r_rx, 6 * MIB, 64),)))  # SEND_WITH_IMM
    recvs.append(RecvRequest(201))  # WRITE_WITH_IMM consumes a receive without buffers
    recvs.append(RecvRequest(202, (seg(r_rx, 7 * MIB, 10), seg(r_sg, 0, 100))))  # SG receive
    side.qp.post_recv(recvs)
    await ctrl.send(dataclasses.asdict(side.qp.address()))
    remote = QpAddress(**await ctrl.recv())
    await side.qp.connect(remote, min(remote.mtu_bytes, backend.mtu_bytes), (reader, writer))
    await ctrl.send("connected")
    assert await ctrl.recv() == "connected"
    await ctrl.send({"target": desc(t_reg), "ro": desc(r_ro)})

    got = await side.take(len(recvs))
    check("server: every receive completed", len(got) == len(recvs),
          [(c.wr_id, c.status.name) for c in got])
    by_id = {c.wr_id: c for c in got}
    for i, size in enumerate(SEND_SIZES):
        c = by_id.get(100 + i)
        ok = (c is not None and c.status == WcStatus.SUCCESS and c.opcode == WcOpcode.RECV
              and c.byte_len == size and c.imm_data is None)
        data = np.frombuffer(rxbuf, dtype=np.uint8, count=size, offset=i * MIB)
        check(f"SEND {size} B lands in the receive buffer (mmap, in place)",
              ok and bool(np.array_equal(data, pattern(i, size))), c)
    c = by_id.get(200)
    check("SEND_WITH_IMM: RECV with imm 0xdeadbeef and WITH_IMM",
          c is not None and c.status == WcStatus.SUCCESS and c.imm_data == 0xDEADBEEF
          and bool(c.wc_flags & WcFlags.WITH_IMM) and c.byte_len == 1
          and rxbuf[6 * MIB] == 0x5A, c)
    c = by_id.get(201)
    check("RDMA_WRITE_WITH_IMM: RECV_RDMA_WITH_IMM with imm 0x01020304",
          c is not None and c.status == WcStatus.SUCCESS
          and c.opcode == WcOpcode.RECV_RDMA_WITH_IMM and c.imm_data == 0x01020304
          and c.byte_len == 100, c)
    c = by_id.get(202)
    sg_expect = bytes(pattern(50, 110))
    check("SG SEND of 3 segments into an SG receive of 2",
          c is not None and c.status == WcStatus.SUCCESS and c.byte_len == 110
          and rxbuf[7 * MIB:7 * MIB + 10] == sg_expect[:10] and bytes(sg_rx) == sg_expect[10:],
          c)

    manifest = await ctrl.recv()
    for name, off, size, seed in manifest["writes"]:
        check(f"{name}: {size} B at offset {off} of the numpy array (in place)",
              bool(np.array_equal(target[off:off + size], pattern(seed, size))))
    final = struct.unpack("<Q", target[0:8].tobytes())[0]
    check("atomics: fetch_add 5 then compare_swap(1005 -> 77) leave 77", final == 77, final)
    await ctrl.send("verified")

    # error pairs: the server side only connects, and for RNR posts nothing
    for _case in ("rkey", "bounds", "access", "rnr"):
        s = await make_pair(backend, ctrl, local_ip)
        assert await ctrl.recv() == "done"
        assert s.qp is not None
        await s.qp.close()
    # peer gone (twice: short timers, then the defaults): close our QP, the client writes
    for _case in ("short", "defaults"):
        s = await make_pair(backend, ctrl, local_ip)
        assert s.qp is not None
        await s.qp.close()
        await ctrl.send("gone")
        assert await ctrl.recv() == "done"

    # close with receives in flight, on this side
    s = Side()
    s.qp = await backend.create_qp(local_ip, QpOptions(), s.notify)
    s.qp.post_recv([RecvRequest(900 + i, (seg(r_rx, i * 64, 64),)) for i in range(40)])
    t0 = time.monotonic()
    await s.qp.close()
    close_s = time.monotonic() - t0
    flushed = s.qp.poll(100)
    check("close with 40 receives posted: each completes WR_FLUSH_ERR (RECV), bounded",
          len(flushed) == 40 and all(c.status == WcStatus.WR_FLUSH_ERR
                                     and c.opcode == WcOpcode.RECV for c in flushed)
          and [c.wr_id for c in flushed] == list(range(900, 940)) and close_s < 2.5,
          f"{len(flushed)} completions in {close_s:.3f} s")
    check("poll after close is empty, close again is a no-op",
          s.qp.poll(10) == [] and await s.qp.close() is None)
    with_ops_flush = await ctrl.recv()
    check("client: close with work in flight", with_ops_flush == "ok", with_ops_flush)
    await side.qp.close()
    await backend.close()
    await backend.close()
    writer.close()
    srv.close()


def local_checks(backend: VerbsBackend) -> None:
    """Registration rules and errors, on this side alone."""
    for name, buf, access, cls in (
            ("read-only bytes", b"abc", Access.LOCAL_WRITE, RegistrationError),
            ("empty buffer", bytearray(), Access.LOCAL_WRITE, RegistrationError),
            ("REMOTE_WRITE without LOCAL_WRITE", bytearray(8), Access.REMOTE_WRITE,
             RegistrationError)):
        try:
            backend.register(memoryview(buf), access)
            check(f"register {name} is refused", False, "no error")
        except cls as exc:
            check(f"register {name} is refused", True, exc)
    strided = np.zeros(64, dtype=np.uint8)[::2]
    try:
        backend.register(memoryview(strided), Access.LOCAL_WRITE)
        check("register a strided numpy slice is refused", False, "no error")
    except RegistrationError as exc:
        check("register a strided numpy slice is refused", True, exc)
    arr = np.zeros((4, 8), dtype=np.float64)  # a 2-D float array registers as 256 bytes
    r = backend.register(memoryview(arr), ALL)
    check("a 2-D float64 numpy array registers at its own address",
          r.length == 256 and r.addr == arr.ctypes.data, (r.length, hex(r.addr)))
    ba = bytearray(64)
    rb = backend.register(memoryview(ba), Access.LOCAL_WRITE)
    try:
        ba.extend(b"x")
        check("a registered bytearray cannot be resized", False, "resized")
    except BufferError as exc:
        check("a registered bytearray cannot be resized", True, exc)
    backend.deregister(rb)
    backend.deregister(rb)  # idempotent
    ba.extend(b"x")
    check("after deregister the bytearray is the caller's again", len(ba) == 65)
    backend.deregister(r)
    try:
        VerbsBackend(device="mlx5_9")
        check("VerbsBackend(device='mlx5_9') raises DeviceNotFound", False, "no error")
    except DeviceNotFound as exc:
        check("VerbsBackend(device='mlx5_9') raises DeviceNotFound",
              "not the requested device mlx5_9" in exc.hint, exc)
    memlock_check()


def memlock_check() -> None:
    """ENOMEM from ibv_reg_mr under a small RLIMIT_MEMLOCK -> RegistrationLimit. Root
    (CAP_IPC_LOCK) is exempt, so a child process drops to uid 65534 first."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 * 1024, 64 * 1024))
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            b = VerbsBackend()
            big = bytearray(4 * MIB)
            try:
                b.register(memoryview(big), Access.LOCAL_WRITE)
                msg = "registered"
            except RegistrationLimit as exc:
                msg = json.dumps({"errno": exc.errno, "text": str(exc), "hint": exc.hint})
        except Exception as exc:
            msg = f"{type(exc).__name__}: {exc}"
        os.write(wr, msg.encode())
        os._exit(0)
    os.close(wr)
    out = b""
    while chunk := os.read(rd, 65536):
        out += chunk
    os.waitpid(pid, 0)
    text = out.decode()
    try:
        got = json.loads(text)
    except ValueError:
        check("4 MiB under a 64 KiB memlock limit -> RegistrationLimit", False, text)
        return
    check("4 MiB under a 64 KiB memlock limit -> RegistrationLimit (ENOMEM, ulimit -l hint)",
          got["errno"] == errno.ENOMEM and "ulimit -l" in got["hint"]
          and "65536 bytes" in got["hint"], got)


# -- client -------------------------------------------------------------------------------

async def client(peer: str, port: int) -> None:
    backend = VerbsBackend(peer_ip=peer)
    src = np.zeros(4 * MIB, dtype=np.uint8)
    r_src = backend.register(memoryview(src), ALL)
    dst = bytearray(2 * MIB)
    r_dst = backend.register(memoryview(dst), Access.LOCAL_WRITE)
    atom = bytearray(16)
    r_atom = backend.register(memoryview(atom), Access.LOCAL_WRITE)
    for _ in range(600):
        try:
            reader, writer = await asyncio.open_connection(peer, port)
            break
        except OSError:
            await asyncio.sleep(0.2)
    ctrl = Ctrl(reader, writer)
    local_ip = writer.get_extra_info("sockname")[0]
    side = Side()
    side.qp = await backend.create_qp(local_ip, QpOptions(), side.notify)
    check("QP notification through the completion channel fd",
          side.qp.notify_mode == ("polling" if os.environ.get("NETIO_VERBS_POLL") == "1"
                                  else "channel"), side.qp.notify_mode)
    # which data path posts and polls (not a check: the lab test asserts it per run)
    print(f"DATAPATH {side.qp.data_path} {side.qp.native_why_not}".rstrip(), flush=True)
    await ctrl.send(dataclasses.asdict(side.qp.address()))
    remote = QpAddress(**await ctrl.recv())
    await side.qp.connect(remote, min(remote.mtu_bytes, backend.mtu_bytes), (reader, writer))
    await ctrl.send("connected")
    assert await ctrl.recv() == "connected"
    descs = await ctrl.recv()
    tgt, ro = descs["target"], descs["ro"]
    qp = side.qp

    async def one(req: SendRequest, name: str, status: WcStatus = WcStatus.SUCCESS
                  ) -> Completion | None:
        qp.post_send([req])
        got = await side.take(1, timeout_s=60)
        c = got[0] if got else None
        check(name, c is not None and c.wr_id == req.wr_id and c.status == status, c)
        return c

    # SEND of every size class from distinct offsets of the source array
    off = 0
    for i, size in enumerate(SEND_SIZES):
        src[off:off + size] = pattern(i, size)
        await one(SendRequest(i, WrOpcode.SEND, (seg(r_src, off, size),),
                              inline=size == INLINE_SIZE), f"SEND {size} B completes")
        off += size
    src[off] = 0x5A
    await one(SendRequest(20, WrOpcode.SEND_WITH_IMM, (seg(r_src, off, 1),),
                          imm_data=0xDEADBEEF), "SEND_WITH_IMM completes")
    off += 1
    writes: list[tuple[str, int, int, int]] = []
    src[off:off + 100] = pattern(77, 100)
    c = await one(SendRequest(21, WrOpcode.RDMA_WRITE_WITH_IMM, (seg(r_src, off, 100),),
                              remote_addr=tgt["addr"] + 4096, rkey=tgt["rkey"],
                              imm_data=0x01020304), "RDMA_WRITE_WITH_IMM completes")
    check("a WRITE completion reports opcode RDMA_WRITE",
          c is not None and c.opcode == WcOpcode.RDMA_WRITE, c)
    writes.append(("WRITE_WITH_IMM", 4096, 100, 77))
    off += 100
    # SG SEND: three pieces of the source array, 110 bytes in all
    full = pattern(50, 110)
    pieces = [(off, 40), (off + 1000, 30), (off + 3000, 40)]
    pos = 0
    for p, n in pieces:
        src[p:p + n] = full[pos:pos + n]
        pos += n
    await one(SendRequest(22, WrOpcode.SEND, tuple(seg(r_src, p, n) for p, n in pieces)),
              "SG SEND of 3 segments completes")
    off += 4000

    # WRITE of every size class to distinct places of the server's numpy array
    toff = 8192
    for i, size in enumerate(WRITE_SIZES):
        seed = 30 + i
        src[off:off + size] = pattern(seed, size)
        c = await one(SendRequest(40 + i, WrOpcode.RDMA_WRITE, (seg(r_src, off, size),),
                                  remote_addr=tgt["addr"] + toff, rkey=tgt["rkey"],
                                  inline=size == INLINE_SIZE), f"WRITE {size} B completes")
        writes.append((f"WRITE {size} B", toff, size, seed))
        off += size
        toff += size + 64
    # SG WRITE: two segments into one remote range
    sg_w = pattern(61, 300)
    src[off:off + 100] = sg_w[:100]
    src[off + 500:off + 700] = sg_w[100:]
    await one(SendRequest(50, WrOpcode.RDMA_WRITE, (seg(r_src, off, 100),
                                                    seg(r_src, off + 500, 200)),
                          remote_addr=tgt["addr"] + toff, rkey=tgt["rkey"]),
              "SG WRITE of 2 segments completes")
    writes.append(("SG WRITE", toff, 300, 61))
    toff += 400
    off += 800

    # READ of every size class from the server's array (its pattern: i % 251)
    doff = 0
    for i, size in enumerate(WRITE_SIZES):
        c = await one(SendRequest(60 + i, WrOpcode.RDMA_READ, (seg(r_dst, doff, size),),
                                  remote_addr=tgt["addr"] + READ_BASE + 17, rkey=tgt["rkey"]),
                      f"READ {size} B completes")
        want = bytes((np.arange(17, 17 + size) % 251).astype(np.uint8))
        check(f"READ {size} B brings the peer's bytes into the bytearray (in place)",
              bytes(dst[doff:doff + size]) == want and c is not None
              and c.opcode == WcOpcode.RDMA_READ and c.byte_len == size)
        doff += size
    c = await one(SendRequest(70, WrOpcode.RDMA_READ, (seg(r_dst, 0, 5),),
                              remote_addr=ro["addr"], rkey=ro["rkey"]),
                  "READ from a REMOTE_READ-only region completes")
    check("... and brings its bytes", bytes(dst[:5]) == b"ro-ok")

    # atomics on the 8 bytes at the start of the server's array (1000 there)
    c = await one(SendRequest(80, WrOpcode.ATOMIC_FETCH_AND_ADD, (seg(r_atom, 0, 8),),
                              remote_addr=tgt["addr"], rkey=tgt["rkey"], compare_add=5),
                  "fetch_add completes")
    check("fetch_add returns the old value 1000",
          struct.unpack("<Q", atom[0:8])[0] == 1000 and c is not None
          and c.opcode == WcOpcode.FETCH_ADD, struct.unpack("<Q", atom[0:8])[0])
    c = await one(SendRequest(81, WrOpcode.ATOMIC_CMP_AND_SWP, (seg(r_atom, 8, 8),),
                              remote_addr=tgt["addr"], rkey=tgt["rkey"], compare_add=1005,
                              swap=77), "compare_swap completes")
    check("compare_swap returns the old value 1005",
          struct.unpack("<Q", atom[8:16])[0] == 1005 and c is not None
          and c.opcode == WcOpcode.COMP_SWAP, struct.unpack("<Q", atom[8:16])[0])

    # unsignaled: 20 unsignaled WRITEs and one signaled, one batch -> one completion
    batch = []
    for i in range(21):
        seed = 100 + i
        src[off:off + 256] = pattern(seed, 256)
        batch.append(SendRequest(300 + i, WrOpcode.RDMA_WRITE, (seg(r_src, off, 256),),
                                 remote_addr=tgt["addr"] + toff, rkey=tgt["rkey"],
                                 signaled=i == 20))
        writes.append((f"unsignaled WRITE {i}", toff, 256, seed))
        off += 256
        toff += 256
    qp.post_send(batch)
    got = await side.take(1)
    await asyncio.sleep(0.5)
    extra = qp.poll(16)
    check("20 unsignaled + 1 signaled WRITE: exactly one completion, the signaled one",
          [c.wr_id for c in got] == [320] and extra == [] and got[0].status == WcStatus.SUCCESS,
          (got, extra))
    check("unsignaled requests are retired with the signaled one",
          qp.counters()["sends_outstanding"] == 0, qp.counters()["sends_outstanding"])

    # one doorbell: 64 signaled WRITEs in one post_send, completions in order
    src[0:512] = pattern(0, 512)
    batch = [SendRequest(400 + i, WrOpcode.RDMA_WRITE, (seg(r_src, 0, 512),),
                         remote_addr=tgt["addr"] + READ_BASE - 512, rkey=tgt["rkey"])
             for i in range(64)]
    t0 = time.monotonic()
    qp.post_send(batch)
    got = await side.take(64)
    figure("batch_64x512B_write_s", time.monotonic() - t0)
    check("64 WRITEs in one post_send: 64 completions in order",
          [c.wr_id for c in got] == list(range(400, 464))
          and all(c.status == WcStatus.SUCCESS for c in got))
    writes.append(("batched WRITE (last)", READ_BASE - 512, 512, 0))
    # message rate and memory: 200 batches of 32 WRITEs with 2 SGEs (the last signaled);
    # pyverbs 44 frees a work request's memory only in close(): RSS must stay flat
    def rss_bytes() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    def batch32(base: int) -> list[SendRequest]:
        return [SendRequest(base + i, WrOpcode.RDMA_WRITE,
                            (seg(r_src, 0, 64), seg(r_src, 64, 64)),
                            remote_addr=tgt["addr"] + READ_BASE - 512, rkey=tgt["rkey"],
                            signaled=i == 31) for i in range(32)]

    for k in range(20):  # warm up
        qp.post_send(batch32(10000 + k * 32))
        await side.take(1)
    rss0 = rss_bytes()
    t0 = time.monotonic()
    for k in range(200):
        qp.post_send(batch32(20000 + k * 32))
        await side.take(1)
    rate = 200 * 32 / (time.monotonic() - t0)
    grown = rss_bytes() - rss0
    figure("write_128B_2sge_batch32_ops_per_s", rate)
    check("6400 WRITEs of 2 SGEs: every request retired, RSS flat (< 256 KiB growth)",
          qp.counters()["sends_outstanding"] == 0 and grown < 256 * 1024, f"+{grown} bytes")

    # an invalid request in a batch is refused before anything is posted
    try:
        qp.post_send([SendRequest(500, WrOpcode.RDMA_WRITE, (seg(r_src, 0, 8),),
                                  remote_addr=tgt["addr"], rkey=tgt["rkey"]),
                      SendRequest(501, WrOpcode.SEND, (seg(r_src, 4 * MIB - 4, 8),))])
        check("a batch with an out-of-region segment is refused whole", False, "posted")
    except RegistrationError as exc:
        check("a batch with an out-of-region segment is refused whole",
              qp.counters()["sends_outstanding"] == 0, exc)
    try:
        qp.post_send([SendRequest(502, WrOpcode.SEND, (seg(r_src, 0, 100),), inline=True)])
        check("inline above max_inline_bytes is refused", False, "posted")
    except RoceError as exc:
        check("inline above max_inline_bytes is refused", True, exc)

    try:
        qp.post_send([SendRequest(503, WrOpcode.ATOMIC_FETCH_AND_ADD, (seg(r_atom, 0, 8),),
                                  remote_addr=tgt["addr"] + 4, rkey=tgt["rkey"],
                                  compare_add=1)])
        check("an atomic at a misaligned remote address is refused", False, "posted")
    except RoceError as exc:
        check("an atomic at a misaligned remote address is refused", "8-byte" in str(exc), exc)

    # figures: sequential 8-byte WRITE latency, 1 MiB WRITE throughput
    n = 50
    t0 = time.monotonic()
    for i in range(n):
        qp.post_send([SendRequest(600 + i, WrOpcode.RDMA_WRITE, (seg(r_src, 0, 8),),
                                  remote_addr=tgt["addr"] + READ_BASE - 512,
                                  rkey=tgt["rkey"])])
        await side.take(1)
    figure("write_8B_latency_us", (time.monotonic() - t0) / n * 1e6)
    t0 = time.monotonic()
    qp.post_send([SendRequest(700 + i, WrOpcode.RDMA_WRITE, (seg(r_src, 0, MIB),),
                              remote_addr=tgt["addr"] + BIG_BASE, rkey=tgt["rkey"])
                  for i in range(8)])
    got = await side.take(8, timeout_s=120)
    dt = time.monotonic() - t0
    figure("write_1MiB_x8_gbps", 8 * MIB * 8 / dt / 1e9)
    check("8 x 1 MiB WRITE complete", len(got) == 8
          and all(c.status == WcStatus.SUCCESS for c in got))
    figure("notifies", side.notifies)

    await ctrl.send({"writes": writes})
    assert await ctrl.recv() == "verified"

    # error paths, each on a fresh QP pair (an error moves the QP to the error state)
    s = await make_pair(backend, ctrl, local_ip)
    assert s.qp is not None
    s.qp.post_send([SendRequest(1000, WrOpcode.RDMA_WRITE, (seg(r_src, 0, 64),),
                                remote_addr=tgt["addr"], rkey=tgt["rkey"] ^ 0x5A5A00),
                    SendRequest(1001, WrOpcode.RDMA_WRITE, (seg(r_src, 0, 64),),
                                remote_addr=tgt["addr"], rkey=tgt["rkey"])])
    got = await s.take(2)
    check("WRITE with a wrong rkey -> REM_ACCESS_ERR, the next one WR_FLUSH_ERR",
          [(c.wr_id, c.status, c.opcode) for c in got]
          == [(1000, WcStatus.REM_ACCESS_ERR, WcOpcode.RDMA_WRITE),
              (1001, WcStatus.WR_FLUSH_ERR, WcOpcode.RDMA_WRITE)], got)
    await s.qp.close()
    await ctrl.send("done")

    s = await make_pair(backend, ctrl, local_ip)
    assert s.qp is not None
    s.qp.post_send([SendRequest(1010, WrOpcode.RDMA_WRITE, (seg(r_src, 0, 64),),
                                remote_addr=tgt["addr"] + tgt["length"] - 4, rkey=tgt["rkey"])])
    got = await s.take(1)
    check("WRITE past the end of the remote region -> REM_ACCESS_ERR",
          [(c.wr_id, c.status) for c in got] == [(1010, WcStatus.REM_ACCESS_ERR)], got)
    await s.qp.close()
    await ctrl.send("done")

    s = await make_pair(backend, ctrl, local_ip)
    assert s.qp is not None
    s.qp.post_send([SendRequest(1020, WrOpcode.RDMA_WRITE, (seg(r_src, 0, 8),),
                                remote_addr=ro["addr"], rkey=ro["rkey"])])
    got = await s.take(1)
    check("WRITE into a REMOTE_READ-only region -> REM_ACCESS_ERR",
          [(c.wr_id, c.status) for c in got] == [(1020, WcStatus.REM_ACCESS_ERR)], got)
    await s.qp.close()
    await ctrl.send("done")

    s = await make_pair(backend, ctrl, local_ip, QpOptions(rnr_retry=0))
    assert s.qp is not None
    s.qp.post_send([SendRequest(1030, WrOpcode.SEND, (seg(r_src, 0, 8),))])
    got = await s.take(1)
    check("SEND with no receive posted, rnr_retry 0 -> RNR_RETRY_EXC_ERR",
          [(c.wr_id, c.status, c.opcode) for c in got]
          == [(1030, WcStatus.RNR_RETRY_EXC_ERR, WcOpcode.SEND)], got)
    await s.qp.close()
    await ctrl.send("done")

    for options, bound_s in ((QpOptions(timeout=8, retry_count=1), 30.0),
                             (QpOptions(), 10.0)):
        # the defaults: retry_count 7, which rxe would retry for ever; netio uses 6 there
        s = await make_pair(backend, ctrl, local_ip, options)
        assert s.qp is not None
        assert await ctrl.recv() == "gone"
        t0 = time.monotonic()
        s.qp.post_send([SendRequest(1040, WrOpcode.RDMA_WRITE, (seg(r_src, 0, 8),),
                                    remote_addr=tgt["addr"], rkey=tgt["rkey"])])
        got = await s.take(1, timeout_s=bound_s)
        took_s = time.monotonic() - t0
        figure(f"peer_gone_timeout{options.timeout}_retry{options.retry_count}_s", took_s)
        check(f"WRITE to a peer whose QP is gone -> RETRY_EXC_ERR (timeout {options.timeout}, "
              f"retry_count {options.retry_count})",
              [(c.wr_id, c.status) for c in got] == [(1040, WcStatus.RETRY_EXC_ERR)],
              f"{got} after {took_s:.2f} s")
        await s.qp.close()
        await ctrl.send("done")

    # close with work in flight: the QP of the main pair, 30 receives and 30 WRITEs
    qp.post_recv([RecvRequest(2000 + i, (seg(r_dst, i * 64, 64),)) for i in range(30)])
    qp.post_send([SendRequest(3000 + i, WrOpcode.RDMA_WRITE, (seg(r_src, 0, 4096),),
                              remote_addr=tgt["addr"] + BIG_BASE, rkey=tgt["rkey"])
                  for i in range(30)])
    t0 = time.monotonic()
    await qp.close()
    close_s = time.monotonic() - t0
    rest = side.got + qp.poll(200)
    sends = [c for c in rest if c.wr_id >= 3000]
    recvs = [c for c in rest if 2000 <= c.wr_id < 3000]
    ok = (len(recvs) == 30 and all(c.status == WcStatus.WR_FLUSH_ERR for c in recvs)
          and [c.wr_id for c in sends] == list(range(3000, 3030))
          and all(c.status in (WcStatus.SUCCESS, WcStatus.WR_FLUSH_ERR) for c in sends)
          and close_s < 2.5)
    figure("close_with_60_in_flight_s", close_s)
    check("close with 30 receives and 30 WRITEs in flight: each completes (SUCCESS or "
          "WR_FLUSH_ERR), bounded", ok,
          f"{len(sends)} sends ({sum(c.status == WcStatus.SUCCESS for c in sends)} ok), "
          f"{len(recvs)} recvs, {close_s:.3f} s")
    try:
        qp.post_send([SendRequest(1, WrOpcode.SEND)])
        check("post after close raises ClosedError", False, "posted")
    except Exception as exc:
        check("post after close raises ClosedError", type(exc).__name__ == "ClosedError", exc)
    await ctrl.send("ok" if ok else "failed")
    await backend.close()
    writer.close()


def main() -> int:
    role, peer, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    t0 = time.monotonic()
    try:
        asyncio.run(server(peer, port) if role == "server" else client(peer, port))
    except Exception as exc:
        import traceback

        traceback.print_exc()
        check(f"{role} ran to the end", False, f"{type(exc).__name__}: {exc}")
    figure(f"{role}_wall_s", time.monotonic() - t0)
    print(f"SUMMARY {role} failed={len(FAILED)} {FAILED}", flush=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
