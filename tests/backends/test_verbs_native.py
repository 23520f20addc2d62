"""netio._verbs_native (native/verbs/) on a host without RDMA: the C side runs against
fake verbs objects whose ``ops.post_send``/``post_recv``/``poll_cq`` are Python callbacks.

``ibv_post_send`` and friends are inline functions that call through
``qp->context->ops``; the structs below are written out from rdma-core 44's
``<infiniband/verbs.h>`` (struct ibv_qp, ibv_pd, ibv_cq, ibv_context with the 32
pointers of struct ibv_context_ops, ibv_send_wr, ibv_recv_wr, ibv_sge, ibv_wc), and
the compiler checks our layout against the installed header. The lab tests
(tests/lab/test_lab_verbs_backend.py) run the module against the kernel's rxe.
"""

from __future__ import annotations

import ctypes as C
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

verbs_native = pytest.importorskip("netio._verbs_native",
                                   reason="built only where libibverbs-dev is installed")
ffi, lib = verbs_native.ffi, verbs_native.lib
HEADER = Path("/usr/include/infiniband/verbs.h")

# --- the ibverbs ABI, from verbs.h ---------------------------------------------------


class Sge(C.Structure):
    _fields_ = [("addr", C.c_uint64), ("length", C.c_uint32), ("lkey", C.c_uint32)]


class Rdma(C.Structure):
    _fields_ = [("remote_addr", C.c_uint64), ("rkey", C.c_uint32)]


class Atomic(C.Structure):
    _fields_ = [("remote_addr", C.c_uint64), ("compare_add", C.c_uint64),
                ("swap", C.c_uint64), ("rkey", C.c_uint32)]


class WrUnion(C.Union):
    _fields_ = [("rdma", Rdma), ("atomic", Atomic)]


class SendWr(C.Structure):
    pass


SendWr._fields_ = [("wr_id", C.c_uint64), ("next", C.POINTER(SendWr)),
                   ("sg_list", C.POINTER(Sge)), ("num_sge", C.c_int), ("opcode", C.c_int),
                   ("send_flags", C.c_uint), ("imm_data", C.c_uint32), ("wr", WrUnion)]


class RecvWr(C.Structure):
    pass


RecvWr._fields_ = [("wr_id", C.c_uint64), ("next", C.POINTER(RecvWr)),
                   ("sg_list", C.POINTER(Sge)), ("num_sge", C.c_int)]


class Wc(C.Structure):
    _fields_ = [("wr_id", C.c_uint64), ("status", C.c_int), ("opcode", C.c_int),
                ("vendor_err", C.c_uint32), ("byte_len", C.c_uint32),
                ("imm_data", C.c_uint32), ("qp_num", C.c_uint32), ("src_qp", C.c_uint32),
                ("wc_flags", C.c_uint), ("pkey_index", C.c_uint16), ("slid", C.c_uint16),
                ("sl", C.c_uint8), ("dlid_path_bits", C.c_uint8)]


POST_SEND = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(SendWr), C.POINTER(C.POINTER(SendWr)))
POST_RECV = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(RecvWr), C.POINTER(C.POINTER(RecvWr)))
POLL_CQ = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int, C.POINTER(Wc))
# struct ibv_context_ops: 32 function pointers; poll_cq is the 12th, post_send the 26th,
# post_recv the 27th
OPS_POLL_CQ, OPS_POST_SEND, OPS_POST_RECV = 11, 25, 26


class Context(C.Structure):
    _fields_ = [("device", C.c_void_p), ("ops", C.c_void_p * 32), ("cmd_fd", C.c_int),
                ("async_fd", C.c_int), ("num_comp_vectors", C.c_int),
                ("mutex", C.c_byte * 40), ("abi_compat", C.c_void_p)]


class Pd(C.Structure):
    _fields_ = [("context", C.c_void_p), ("handle", C.c_uint32)]


class Cq(C.Structure):
    _fields_ = [("context", C.c_void_p), ("channel", C.c_void_p), ("cq_context", C.c_void_p),
                ("handle", C.c_uint32), ("cqe", C.c_int), ("mutex", C.c_byte * 40),
                ("cond", C.c_byte * 48), ("comp_events_completed", C.c_uint32),
                ("async_events_completed", C.c_uint32)]


class Qp(C.Structure):
    _fields_ = [("context", C.c_void_p), ("qp_context", C.c_void_p), ("pd", C.c_void_p),
                ("send_cq", C.c_void_p), ("recv_cq", C.c_void_p), ("srq", C.c_void_p),
                ("handle", C.c_uint32), ("qp_num", C.c_uint32), ("state", C.c_int),
                ("qp_type", C.c_int), ("mutex", C.c_byte * 40), ("cond", C.c_byte * 48),
                ("events_completed", C.c_uint32)]


IBV_QPT_RC = 2
IBV_WR_RDMA_WRITE, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_READ = 0, 3, 4
IBV_WR_ATOMIC_CMP_AND_SWP = 5
IBV_SEND_SIGNALED, IBV_SEND_INLINE = 2, 8


class FakeVerbs:
    """A context, PD, CQ and RC QP laid out as libibverbs lays them out; the QP's
    context routes post_send/post_recv/poll_cq to Python."""

    def __init__(self, qp_num: int = 0x11) -> None:
        self.ctx = Context()
        self.pd = Pd(C.addressof(self.ctx), 1)
        self.cq = Cq(context=C.addressof(self.ctx), cqe=256)
        self.qp = Qp(context=C.addressof(self.ctx), pd=C.addressof(self.pd),
                     send_cq=C.addressof(self.cq), recv_cq=C.addressof(self.cq),
                     qp_num=qp_num, qp_type=IBV_QPT_RC)
        self.sent: list[list[dict[str, Any]]] = []
        self.received: list[list[tuple[int, list[tuple[int, int, int]]]]] = []
        self.refuse_at: int | None = None
        self.wcs: list[Wc] = []
        self._cbs = (POST_SEND(self._post_send), POST_RECV(self._post_recv),
                     POLL_CQ(self._poll))
        for index, cb in zip((OPS_POST_SEND, OPS_POST_RECV, OPS_POLL_CQ), self._cbs,
                             strict=True):
            self.ctx.ops[index] = C.cast(cb, C.c_void_p)

    @property
    def qp_addr(self) -> int:
        return C.addressof(self.qp)

    @property
    def cq_addr(self) -> int:
        return C.addressof(self.cq)

    def _post_send(self, _qp: int, wr: Any, bad: Any) -> int:
        out = []
        i = 0
        while wr:
            w = wr.contents
            if self.refuse_at is not None and i == self.refuse_at:
                bad[0] = wr
                self.sent.append(out)
                return 12  # ENOMEM, as a full send queue answers
            sges = [(w.sg_list[k].addr, w.sg_list[k].length, w.sg_list[k].lkey)
                    for k in range(w.num_sge)]
            out.append({"wr_id": w.wr_id, "opcode": w.opcode, "flags": w.send_flags,
                        "imm": w.imm_data, "sges": sges, "rdma": (w.wr.rdma.remote_addr,
                                                                   w.wr.rdma.rkey),
                        "atomic": (w.wr.atomic.remote_addr, w.wr.atomic.compare_add,
                                   w.wr.atomic.swap, w.wr.atomic.rkey)})
            wr = w.next
            i += 1
        self.sent.append(out)
        return 0

    def _post_recv(self, _qp: int, wr: Any, _bad: Any) -> int:
        out = []
        while wr:
            w = wr.contents
            out.append((w.wr_id, [(w.sg_list[k].addr, w.sg_list[k].length, w.sg_list[k].lkey)
                                  for k in range(w.num_sge)]))
            wr = w.next
        self.received.append(out)
        return 0

    def _poll(self, _cq: int, n: int, wc: Any) -> int:
        take, self.wcs = self.wcs[:n], self.wcs[n:]
        for i, w in enumerate(take):
            wc[i] = w
        return len(take)


def test_abi_matches_the_installed_header() -> None:
    """The module was compiled against the same struct layout as the header here (the
    compiler says so) and as this test's ctypes copy of it."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not HEADER.is_file():
        pytest.skip("no C compiler or verbs.h")
    src = ("#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n"
           "int main(void){printf(\"%zu %zu %zu\\n\", sizeof(struct ibv_send_wr), "
           "sizeof(struct ibv_wc), offsetof(struct ibv_qp, qp_num));return 0;}\n")
    tmp = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True,
                              check=True).stdout.strip())
    (tmp / "abi.c").write_text(src)
    subprocess.run([cc, "-o", str(tmp / "abi"), str(tmp / "abi.c")], check=True)
    want = [int(x) for x in subprocess.run([str(tmp / "abi")], capture_output=True,
                                           text=True, check=True).stdout.split()]
    shutil.rmtree(tmp)
    assert [lib.netio_verbs_abi(i) for i in range(3)] == want
    assert C.sizeof(Wc) == want[1] and Qp.qp_num.offset == want[2]
    assert Context.ops.offset == 8 and C.sizeof(Qp) >= want[2]


def _find(words: list[int], qp_num: int) -> tuple[int, int, int, int]:
    obj = (C.c_uint64 * len(words))(*words)
    out = ffi.new("uintptr_t[3]")
    n = lib.netio_verbs_find_qp(C.addressof(obj), C.sizeof(obj), qp_num, IBV_QPT_RC, out,
                                out + 1, out + 2)
    return n, int(out[0]), int(out[1]), int(out[2])


def test_find_qp_takes_only_a_checked_pointer() -> None:
    """Among junk words (small integers, unaligned values, unmapped addresses: read
    through process_vm_readv, never dereferenced) only the struct ibv_qp with the right
    QP number and type, whose PD and CQs belong to its context, is taken."""
    fake = FakeVerbs(qp_num=0x11)
    unmapped = 0x10  # page zero is never mapped
    junk = [0, 1, 7, unmapped, 0xDEADBEEF0, (1 << 47) - 8, C.addressof(fake.ctx)]
    n, qp, scq, rcq = _find([*junk, fake.qp_addr, 42], 0x11)
    assert (n, qp, scq, rcq) == (1, fake.qp_addr, fake.cq_addr, fake.cq_addr)
    assert _find([*junk, fake.qp_addr], 0x12)[0] == 0  # another QP number
    assert _find([fake.qp_addr, fake.qp_addr], 0x11)[0] == 1  # the same pointer twice
    other = FakeVerbs(qp_num=0x11)
    assert _find([fake.qp_addr, other.qp_addr], 0x11)[0] == 2  # ambiguous: caller refuses
    stranger = Context()
    fake.cq.context = C.addressof(stranger)  # a CQ of another device context
    assert _find([fake.qp_addr], 0x11)[0] == 0
    fake.cq.context = C.addressof(fake.ctx)
    fake.pd.context = C.addressof(stranger)
    assert _find([fake.qp_addr], 0x11)[0] == 0


def test_post_send_builds_one_linked_list() -> None:
    """Flat arrays in, one ibv_post_send of a chained list out: each request's opcode,
    flags, immediate data, its own SGEs, and the rdma or atomic member by opcode."""
    fake = FakeVerbs()
    bad = ffi.new("int *")
    n = 70  # more than the stack lists: the heap path
    opcodes = [IBV_WR_RDMA_WRITE, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_READ,
               IBV_WR_ATOMIC_CMP_AND_SWP] * 17 + [0, 0]
    num_sge = [i % 3 for i in range(n)]
    total = sum(num_sge)
    rc = lib.netio_verbs_post_send(
        fake.qp_addr, n, [1000 + i for i in range(n)], opcodes,
        [IBV_SEND_SIGNALED if i == n - 1 else IBV_SEND_INLINE * (i % 2) for i in range(n)],
        [0x10000 + 8 * i for i in range(n)], [0x500 + i for i in range(n)],
        [0x01020304 + i for i in range(n)], [i * 3 for i in range(n)],
        [(1 << 64) - 1 - i for i in range(n)], num_sge, [0x7000 + 16 * k for k in range(total)],
        [16 + k for k in range(total)], [0x99 + k for k in range(total)], bad)
    assert rc == 0 and len(fake.sent) == 1
    got = fake.sent[0]
    assert [w["wr_id"] for w in got] == [1000 + i for i in range(n)]
    k = 0
    for i, w in enumerate(got):
        assert w["opcode"] == opcodes[i]
        assert w["flags"] == (IBV_SEND_SIGNALED if i == n - 1 else IBV_SEND_INLINE * (i % 2))
        assert w["imm"] == 0x01020304 + i
        assert w["sges"] == [(0x7000 + 16 * j, 16 + j, 0x99 + j)
                             for j in range(k, k + num_sge[i])]
        k += num_sge[i]
        if opcodes[i] == IBV_WR_ATOMIC_CMP_AND_SWP:
            assert w["atomic"] == (0x10000 + 8 * i, i * 3, (1 << 64) - 1 - i, 0x500 + i)
        elif opcodes[i] in (IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ):
            assert w["rdma"] == (0x10000 + 8 * i, 0x500 + i)
        else:  # SEND: the union stays zero
            assert w["rdma"] == (0, 0)


def test_post_send_reports_the_first_refused_request() -> None:
    fake = FakeVerbs()
    fake.refuse_at = 3
    bad = ffi.new("int *")
    n = 5
    rc = lib.netio_verbs_post_send(fake.qp_addr, n, list(range(n)), [0] * n, [0] * n,
                                   [0] * n, [0] * n, [0] * n, [0] * n, [0] * n, [1] * n,
                                   [0x1000] * n, [8] * n, [1] * n, bad)
    assert (rc, bad[0]) == (12, 3)


def test_post_recv_and_poll() -> None:
    fake = FakeVerbs()
    bad = ffi.new("int *")
    assert lib.netio_verbs_post_recv(fake.qp_addr, 3, [7, 8, 9], [1, 0, 2],
                                     [0x100, 0x200, 0x300], [10, 20, 30], [1, 2, 3],
                                     bad) == 0
    assert fake.received == [[(7, [(0x100, 10, 1)]), (8, []),
                              (9, [(0x200, 20, 2), (0x300, 30, 3)])]]
    # 150 completions: the C side polls in chunks of 64 and fills the flat arrays
    fake.wcs = [Wc(wr_id=i, status=i % 3, opcode=128 if i % 2 else 1, byte_len=i * 2,
                   imm_data=0xA0B0C0D0, qp_num=0x11, src_qp=i, wc_flags=i % 4)
                for i in range(150)]
    arrays = [ffi.new("uint64_t[]", 200)] + [ffi.new("uint32_t[]", 200) for _ in range(7)]
    got = lib.netio_verbs_poll_cq(fake.cq_addr, 200, *arrays)
    assert got == 150
    rows = list(zip(*(ffi.unpack(a, got) for a in arrays), strict=True))
    assert rows[149] == (149, 149 % 3, 128, 298, 0xA0B0C0D0, 0x11, 149, 1)
    assert [r[0] for r in rows] == list(range(150))
    assert lib.netio_verbs_poll_cq(fake.cq_addr, 200, *arrays) == 0


def test_native_qp_attach_refuses_an_object_without_a_qp() -> None:
    """The Python side: a pyverbs-like object holding no struct ibv_qp gives no native
    path and says why; NETIO_VERBS_NATIVE=0 turns it off."""
    from netio.backends.verbs_native import NativeQp

    qp, why = NativeQp.attach(object(), 0x11, IBV_QPT_RC)
    assert qp is None and "0 candidates" in why


def test_native_path_can_be_forced_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from netio.backends.verbs_native import NativeQp

    monkeypatch.setenv("NETIO_VERBS_NATIVE", "0")
    assert NativeQp.attach(object(), 0x11, IBV_QPT_RC) == (None, "NETIO_VERBS_NATIVE=0")


def _out(n: int = 64) -> list[Any]:
    return [ffi.new("uint64_t[]", n)] + [ffi.new("uint32_t[]", n) for _ in range(7)]


class CountingFake(FakeVerbs):
    """A fake whose CQ stays empty for the first ``empty`` polls, then gives at most
    ``per_poll`` completions a poll."""

    def __init__(self, empty: int = 0, per_poll: int = 64, qp_num: int = 0x11) -> None:
        super().__init__(qp_num)
        self.empty = empty
        self.per_poll = per_poll
        self.polls = 0
        self.log: list[str] = []

    def _poll(self, _cq: int, n: int, wc: Any) -> int:
        self.polls += 1
        if self.polls <= self.empty:
            return 0
        return super()._poll(_cq, min(n, self.per_poll), wc)

    def _post_send(self, _qp: int, wr: Any, bad: Any) -> int:
        self.log.append("send")
        return super()._post_send(_qp, wr, bad)

    def _post_recv(self, _qp: int, wr: Any, bad: Any) -> int:
        self.log.append("recv")
        return super()._post_recv(_qp, wr, bad)


def test_spin_cq_returns_the_first_cq_with_completions() -> None:
    """Two CQs polled in turn; the second gets completions after 5 empty polls: they come
    back with which = 1, and the first CQ was polled as often as the second (round robin)."""
    a, b = CountingFake(), CountingFake(empty=5)
    b.wcs = [Wc(wr_id=40 + i, status=0, opcode=128, byte_len=64, qp_num=0x11)
             for i in range(3)]
    which = ffi.new("int *")
    arrays = _out()
    got = lib.netio_verbs_spin_cq([a.cq_addr, b.cq_addr], 2, [0], 0, 10**12, 64, which,
                                  *arrays)
    assert (got, which[0]) == (3, 1)
    assert list(ffi.unpack(arrays[0], 3)) == [40, 41, 42]
    assert a.polls == b.polls == 6


def test_spin_cq_stops_for_a_readable_descriptor_or_the_time() -> None:
    """No completion ever: a readable descriptor ends the spin at the first check (round
    0, so one poll per CQ), as does a spin of 0 ns; neither takes a completion."""
    import os

    fake = CountingFake()
    which = ffi.new("int *")
    r, w = os.pipe()
    try:
        os.write(w, b"x")
        assert lib.netio_verbs_spin_cq([fake.cq_addr], 1, [r], 1, 10**12, 64, which,
                                       *_out()) == 0
        assert fake.polls == 1
    finally:
        os.close(r)
        os.close(w)
    assert lib.netio_verbs_spin_cq([fake.cq_addr], 1, [0], 0, 0, 64, which, *_out()) == 0
    assert fake.polls == 2


def _post_poll(fake: FakeVerbs, recv_ids: list[int], send_ids: list[int], want: int,
               spin_ns: int = 10**12) -> tuple[int, list[Any], list[int]]:
    rc_which_bad = [ffi.new("int *") for _ in range(3)]
    arrays = _out()
    nr, ns = len(recv_ids), len(send_ids)
    got = lib.netio_verbs_post_poll(
        fake.qp_addr, fake.cq_addr, nr, recv_ids or [0], [1] * nr or [0], [0x100] * nr or [0],
        [64] * nr or [0], [7] * nr or [0], ns, send_ids or [0], [2] * ns or [0],
        [IBV_SEND_SIGNALED] * ns or [0], [0] * ns or [0], [0] * ns or [0], [0] * ns or [0],
        [0] * ns or [0], [0] * ns or [0], [1] * ns or [0], [0x200] * ns or [0],
        [64] * ns or [0], [7] * ns or [0], want, spin_ns, 64, *rc_which_bad, *arrays)
    return got, arrays, [int(p[0]) for p in rc_which_bad]


def test_post_poll_posts_receives_then_sends_and_polls_until_the_one_wanted() -> None:
    """One call: the receive is posted before the SEND (the answer must find it), then the
    CQ is polled (here after 3 empty polls, then one completion a poll) until wr_id 9
    has come; the completion after it stays in the CQ."""
    fake = CountingFake(empty=3, per_poll=1)
    fake.wcs = [Wc(wr_id=5, status=0, opcode=0), Wc(wr_id=9, status=0, opcode=128),
                Wc(wr_id=11, status=0, opcode=128)]
    fake.refuse_at = None
    got, arrays, (rc, _which, _bad) = _post_poll(fake, [9], [5], want=9)
    assert fake.log == ["recv", "send"]
    assert (got, rc) == (2, 0)
    assert list(ffi.unpack(arrays[0], 2)) == [5, 9]
    assert [w.wr_id for w in fake.wcs] == [11]
    assert fake.received == [[(9, [(0x100, 64, 7)])]]
    assert [w["wr_id"] for w in fake.sent[0]] == [5]


def test_post_poll_stops_at_an_error_completion_and_reports_a_refused_post() -> None:
    fake = CountingFake(per_poll=1)
    fake.wcs = [Wc(wr_id=5, status=12, opcode=0), Wc(wr_id=9, status=0, opcode=128)]
    got, arrays, (rc, _which, _bad) = _post_poll(fake, [], [], want=9)
    assert (got, rc) == (1, 0) and list(ffi.unpack(arrays[1], 1)) == [12]  # RETRY_EXC
    assert _post_poll(fake, [], [], want=0)[0] == 0  # nothing wanted: no poll
    assert fake.polls == 1
    fake.refuse_at = 0
    got, _arrays, (rc, which, bad) = _post_poll(fake, [3], [4], want=3)
    assert (got, rc, which, bad) == (-2, 12, 2, 0)  # the receive went, the SEND did not


def _pingpong(fake: FakeVerbs, initiator: bool, first: int, count: int,
              every: int) -> tuple[int, list[int], int, Any]:
    t_ns = ffi.new("int64_t[]", max(1, count))
    steps = ffi.new("int[2]")
    arrays = _out()
    rc = lib.netio_verbs_pingpong(fake.qp_addr, fake.cq_addr, int(initiator), first, count,
                                  every, 7, 0x100, 64, 5, 20, 21, 2, IBV_SEND_INLINE,
                                  0x200, 64, 5, 10**12, t_ns, steps, steps + 1, *arrays)
    return rc, list(ffi.unpack(t_ns, count)), int(steps[0]), arrays


def test_pingpong_initiator_posts_receive_then_send_and_signals_as_asked() -> None:
    """ib_send_lat's loop: per step the receive for the answer, then the SEND (signaled
    at steps 0 and 2 with signal_every 2, and at the last, which carries wr_id 21); the
    step ends when the answer (wr_id 7) is polled; the last SEND's completion is awaited
    before it returns, and the send completions in between are taken in stride."""
    fake = CountingFake(per_poll=1)
    fake.wcs = [Wc(wr_id=20), Wc(wr_id=7, opcode=128), Wc(wr_id=7, opcode=128),
                Wc(wr_id=20), Wc(wr_id=7, opcode=128), Wc(wr_id=21)]
    rc, t_ns, steps, _arrays = _pingpong(fake, True, 0, 3, 2)
    assert (rc, steps) == (0, 3) and all(t >= 0 for t in t_ns)
    assert fake.log == ["recv", "send"] * 3
    assert [r[0][0] for r in fake.received] == [7, 7, 7]
    sent = [(w[0]["wr_id"], w[0]["flags"], w[0]["sges"]) for w in fake.sent]
    assert sent == [(20, IBV_SEND_INLINE | IBV_SEND_SIGNALED, [(0x200, 64, 5)]),
                    (20, IBV_SEND_INLINE, [(0x200, 64, 5)]),
                    (21, IBV_SEND_INLINE | IBV_SEND_SIGNALED, [(0x200, 64, 5)])]
    assert fake.wcs == []


def test_pingpong_responder_and_what_stops_it() -> None:
    """The responder that has its first ping already (first 2) answers it with no wait,
    posts no receive after the last ping; an error status or a foreign wr_id stops the
    loop with return 1 and that completion at index 0."""
    fake = CountingFake(per_poll=1)
    fake.wcs = [Wc(wr_id=7, opcode=128), Wc(wr_id=21)]
    rc, _t, steps, _arrays = _pingpong(fake, False, 2, 2, 64)
    assert (rc, steps) == (0, 2)
    assert fake.log == ["recv", "send", "send"]  # no receive after the last ping
    for bad in (Wc(wr_id=7, status=13, opcode=128), Wc(wr_id=999, opcode=128)):
        fake = CountingFake(per_poll=1)
        fake.wcs = [Wc(wr_id=20), bad]
        rc, _t, steps, arrays = _pingpong(fake, True, 0, 3, 1)
        assert (rc, steps, int(arrays[0][0]), int(arrays[1][0])) == (1, 0, bad.wr_id,
                                                                     bad.status)
