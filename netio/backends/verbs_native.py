"""The verbs backend's native data path: batched post and poll in C (netio._verbs_native).

``ibv_post_send``, ``ibv_post_recv`` and ``ibv_poll_cq`` are inline functions of
``<infiniband/verbs.h>``, so the optional extension built from ``native/verbs/`` is compiled
against the header (cffi API mode). pyverbs keeps the control path; for each QP this module
finds the ``struct ibv_qp`` pointer inside the pyverbs QP object (pyverbs 44 does not hand
it to Python) and accepts it only when the C side checked it against the ibverbs ABI (QP
number, type, its PD's and CQs' context). Then a batch of work requests goes to C as flat
lists (cffi turns a list into a C array in one call), becomes one linked list and one
``ibv_post_send``; a poll fills flat arrays with up to hundreds of completions. pyverbs
builds and frees a Python object per work request, scatter/gather entry and completion.

The native path is used when the extension is importable (it is built only where
libibverbs-dev was installed) and ``NETIO_VERBS_NATIVE`` is not ``0``; otherwise, and for
every QP where the pointer is not found, the verbs backend posts and polls through pyverbs.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import Any

ENV = "NETIO_VERBS_NATIVE"
POLL_CHUNK = 256  # completions per call into C; poll() loops for more

_module: Any = None
_why_not = ""


def load() -> tuple[Any, str]:
    """The extension module (None when unusable) and, when None, why."""
    global _module, _why_not
    if os.environ.get(ENV) == "0":
        return None, f"{ENV}=0"
    if _module is None and not _why_not:
        try:
            _module = importlib.import_module("netio._verbs_native")
        except ImportError as exc:
            _why_not = (f"netio._verbs_native is not built ({exc}): install libibverbs-dev "
                        "and make install again")
    return _module, _why_not


_NONE_RECV = ([0],) * 5
_NONE_SEND = ([0],) * 12
# the C types of netio_verbs_post_recv's and netio_verbs_post_send's array arguments
_RECV_TYPES = ("uint64_t", "uint32_t", "uint64_t", "uint32_t", "uint32_t")
_SEND_TYPES = ("uint64_t", "uint32_t", "uint32_t", "uint64_t", "uint32_t", "uint32_t",
               "uint64_t", "uint64_t", "uint32_t", "uint64_t", "uint32_t", "uint32_t")


def _arrays(lists: Sequence[Sequence[int]], total: int,
            first_sge: int) -> Sequence[Sequence[int]]:
    """``lists`` with its scatter/gather lists (from index ``first_sge``) made non-empty:
    cffi wants an array even when no request has a segment."""
    if lists[first_sge]:
        return lists
    return (*lists[:first_sge], *([0],) * (total - first_sge))


class NativeQp:
    """Post and poll one QP through C. ``qp_addr``/``cq_addr``: the checked pointers."""

    __slots__ = ("_bad", "_cq", "_ffi", "_lib", "_nothing", "_out", "_post", "_qp")

    def __init__(self, module: Any, qp_addr: int, cq_addr: int) -> None:
        self._ffi = ffi = module.ffi
        self._lib = module.lib
        self._qp = qp_addr
        self._cq = cq_addr
        self._bad = ffi.new("int *")
        self._post = ffi.new("int[2]")  # post_poll: errno of a failed post, which queue
        self._nothing = self.build((), ())
        self._out = (ffi.new("uint64_t[]", POLL_CHUNK),
                     *(ffi.new("uint32_t[]", POLL_CHUNK) for _ in range(7)))

    @property
    def cq_addr(self) -> int:
        """The checked ``struct ibv_cq`` pointer (for :func:`spin`)."""
        return self._cq

    @classmethod
    def attach(cls, pyverbs_qp: Any, qp_num: int, qp_type: int) -> tuple[NativeQp | None, str]:
        """The native path for a pyverbs QP whose send and receive CQ are one CQ; (None,
        why) when it cannot be used."""
        module, why = load()
        if module is None:
            return None, why
        ffi, lib = module.ffi, module.lib
        out = ffi.new("uintptr_t[3]")
        found = lib.netio_verbs_find_qp(id(pyverbs_qp), type(pyverbs_qp).__basicsize__,
                                        qp_num, qp_type, out, out + 1, out + 2)
        if found < 0:
            return None, (f"cannot read this process's memory safely (errno {-found}): "
                          "process_vm_readv is refused")
        if found != 1:
            return None, (f"{found} candidates for the struct ibv_qp of QP {qp_num} in the "
                          f"pyverbs object (this pyverbs is laid out differently)")
        if out[1] != out[2]:
            return None, "the QP's send and receive CQs differ"
        return cls(module, int(out[0]), int(out[1])), ""

    def post_send(self, wr_id: Sequence[int], opcode: Sequence[int], flags: Sequence[int],
                  remote_addr: Sequence[int], rkey: Sequence[int], imm_be: Sequence[int],
                  compare_add: Sequence[int], swap: Sequence[int], num_sge: Sequence[int],
                  sge_addr: Sequence[int], sge_len: Sequence[int],
                  sge_lkey: Sequence[int]) -> tuple[int, int]:
        """One ``ibv_post_send`` of the whole batch; (errno or 0, first request not posted)."""
        n = len(wr_id)
        if not sge_addr:  # cffi wants an array even when no request has a segment
            sge_addr, sge_len, sge_lkey = [0], [0], [0]
        rc = self._lib.netio_verbs_post_send(self._qp, n, wr_id, opcode, flags, remote_addr,
                                             rkey, imm_be, compare_add, swap, num_sge,
                                             sge_addr, sge_len, sge_lkey, self._bad)
        return int(rc), int(self._bad[0])

    def post_recv(self, wr_id: Sequence[int], num_sge: Sequence[int],
                  sge_addr: Sequence[int], sge_len: Sequence[int],
                  sge_lkey: Sequence[int]) -> tuple[int, int]:
        """One ``ibv_post_recv`` of the whole batch; (errno or 0, first not posted)."""
        if not sge_addr:
            sge_addr, sge_len, sge_lkey = [0], [0], [0]
        rc = self._lib.netio_verbs_post_recv(self._qp, len(wr_id), wr_id, num_sge, sge_addr,
                                             sge_len, sge_lkey, self._bad)
        return int(rc), int(self._bad[0])

    def build(self, recv: Sequence[Sequence[int]], send: Sequence[Sequence[int]]) -> Any:
        """C arrays of receives and sends for :meth:`post_poll`, made once: ``recv`` is
        (wr_id, num_sge, sge_addr, sge_len, sge_lkey) and ``send`` the twelve lists of
        :meth:`post_send`; empty sequences for none."""
        ffi = self._ffi
        n_recv = len(recv[0]) if recv else 0
        n_send = len(send[0]) if send else 0
        rv = _arrays(recv, 5, 2) if n_recv else _NONE_RECV
        sd = _arrays(send, 12, 9) if n_send else _NONE_SEND
        return (n_recv, tuple(ffi.new(f"{t}[]", list(v)) for t, v in zip(_RECV_TYPES, rv,
                                                                          strict=True)),
                n_send, tuple(ffi.new(f"{t}[]", list(v)) for t, v in zip(_SEND_TYPES, sd,
                                                                          strict=True)))

    def post_poll(self, posts: Any, want_wr_id: int, spin_ns: int
                  ) -> tuple[list[tuple[int, ...]] | None, int, int, int]:
        """Post ``posts`` (from :meth:`build`, or None: nothing): receives, then sends;
        then busy-poll until ``want_wr_id`` or an error completion comes or ``spin_ns``
        pass: one call into C. Returns (completions as in :meth:`poll`, None when
        ``ibv_poll_cq`` failed; errno of a refused post or 0; 1 receives or 2 sends
        refused; first request not posted)."""
        arrays = self._out
        n_recv, rv, n_send, sd = posts if posts is not None else self._nothing
        got = self._lib.netio_verbs_post_poll(self._qp, self._cq, n_recv, *rv, n_send, *sd,
                                              want_wr_id, spin_ns, POLL_CHUNK, self._post,
                                              self._post + 1, self._bad, *arrays)
        if got == -2:
            return [], int(self._post[0]), int(self._post[1]), int(self._bad[0])
        if got < 0:
            return None, 0, 0, 0
        if not got:
            return [], 0, 0, 0
        unpack = self._ffi.unpack
        return list(zip(*(unpack(a, got) for a in arrays), strict=True)), 0, 0, 0

    def pingpong(self, initiator: bool, first: int, count: int, signal_every: int,
                 recv: tuple[int, int, int, int], send: tuple[int, int, int, int, int, int, int],
                 spin_ns: int) -> tuple[int, list[int], int, int, tuple[int, ...] | None]:
        """``netio_verbs_pingpong``: ``recv`` is (wr_id, addr, length, lkey), ``send``
        (wr_id, last_wr_id, opcode, flags, addr, length, lkey). Returns (its return code,
        the initiator's step durations in ns, steps done, errno of a failed post, the
        completion that stopped it or None)."""
        ffi = self._ffi
        t_ns = ffi.new("int64_t[]", max(1, count))
        steps = ffi.new("int[2]")
        rc = self._lib.netio_verbs_pingpong(self._qp, self._cq, int(initiator), first, count,
                                            signal_every, *recv, *send, spin_ns, t_ns, steps,
                                            steps + 1, *self._out)
        done = int(steps[0])
        bad = tuple(int(a[0]) for a in self._out) if rc == 1 else None
        return int(rc), list(ffi.unpack(t_ns, done)) if initiator else [], done, \
            int(steps[1]), bad

    def poll(self, max_entries: int) -> list[tuple[int, ...]] | None:
        """Up to ``max_entries`` completions as (wr_id, status, opcode, byte_len, imm_be,
        qp_num, src_qp, wc_flags); None when ``ibv_poll_cq`` failed."""
        out: list[tuple[int, ...]] = []
        arrays = self._out
        unpack = self._ffi.unpack
        while len(out) < max_entries:
            want = min(POLL_CHUNK, max_entries - len(out))
            got = self._lib.netio_verbs_poll_cq(self._cq, want, *arrays)
            if got < 0:
                return out or None
            if got:
                out.extend(zip(*(unpack(a, got) for a in arrays), strict=True))
            if got < want:
                break
        return out


class Spinner:
    """Busy-polls the CQs of several native QPs in one call into C (see
    ``netio_verbs_spin_cq``)."""

    __slots__ = ("_ffi", "_lib", "_out", "_which")

    def __init__(self, module: Any) -> None:
        self._ffi = ffi = module.ffi
        self._lib = module.lib
        self._which = ffi.new("int *")
        self._out = (ffi.new("uint64_t[]", POLL_CHUNK),
                     *(ffi.new("uint32_t[]", POLL_CHUNK) for _ in range(7)))

    def spin(self, cq_addrs: Sequence[int], fds: Sequence[int], spin_ns: int
             ) -> tuple[int, list[tuple[int, ...]] | None]:
        """(index of the CQ that had completions, its completions as in
        :meth:`NativeQp.poll`); (…, []) when ``spin_ns`` passed first or one of ``fds``
        became readable, (…, None) when ``ibv_poll_cq`` failed on that CQ."""
        got = self._lib.netio_verbs_spin_cq(list(cq_addrs), len(cq_addrs), list(fds) or [0],
                                            len(fds), spin_ns, POLL_CHUNK, self._which,
                                            *self._out)
        which = int(self._which[0])
        if got < 0:
            return which, None
        if got == 0:
            return which, []
        unpack = self._ffi.unpack
        return which, list(zip(*(unpack(a, got) for a in self._out), strict=True))


__all__ = ["ENV", "NativeQp", "Spinner", "load"]
