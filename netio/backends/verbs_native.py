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


class NativeQp:
    """Post and poll one QP through C. ``qp_addr``/``cq_addr``: the checked pointers."""

    __slots__ = ("_bad", "_cq", "_ffi", "_lib", "_out", "_qp")

    def __init__(self, module: Any, qp_addr: int, cq_addr: int) -> None:
        self._ffi = ffi = module.ffi
        self._lib = module.lib
        self._qp = qp_addr
        self._cq = cq_addr
        self._bad = ffi.new("int *")
        self._out = (ffi.new("uint64_t[]", POLL_CHUNK),
                     *(ffi.new("uint32_t[]", POLL_CHUNK) for _ in range(7)))

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


__all__ = ["ENV", "NativeQp", "load"]
