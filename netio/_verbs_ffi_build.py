"""Emit the cffi (API mode) glue for netio._verbs_native, the optional native verbs
data path (native/verbs/).

CMake runs this file as a script at build time, only where ``infiniband/verbs.h`` and
libibverbs are found: ``python _verbs_ffi_build.py OUT.c``. API mode, because the calls
it wraps (``ibv_post_send``, ``ibv_post_recv``, ``ibv_poll_cq``) are inline functions of
verbs.h that no shared library exports. The declarations come from the block between
``CDEF BEGIN`` and ``CDEF END`` in ``native/verbs/netio_verbs.h``.
"""

from __future__ import annotations

import pathlib
import sys

import cffi

_ROOT = pathlib.Path(__file__).resolve().parent.parent
_HEADER = _ROOT / "native" / "verbs" / "netio_verbs.h"


def cdef_text() -> str:
    text = _HEADER.read_text()
    begin = text.index("/* CDEF BEGIN */") + len("/* CDEF BEGIN */")
    end = text.index("/* CDEF END */")
    return text[begin:end]


def make_builder() -> cffi.FFI:
    ffi = cffi.FFI()
    ffi.cdef(cdef_text())
    ffi.set_source("netio._verbs_native", '#include "netio_verbs.h"\n')
    return ffi


if __name__ == "__main__":
    out = pathlib.Path(sys.argv[1])
    make_builder().emit_c_code(str(out))
