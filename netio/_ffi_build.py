"""Emit the cffi (API mode) glue for netio._native.

CMake runs this file as a script at build time: ``python _ffi_build.py OUT.c``.
The C declarations come from the block between ``CDEF BEGIN`` and ``CDEF END``
in ``native/netio_native.h``, so the header stays the one source of truth.
"""

from __future__ import annotations

import pathlib
import sys

import cffi

_ROOT = pathlib.Path(__file__).resolve().parent.parent
_HEADER = _ROOT / "native" / "netio_native.h"


def cdef_text() -> str:
    text = _HEADER.read_text()
    begin = text.index("/* CDEF BEGIN */") + len("/* CDEF BEGIN */")
    end = text.index("/* CDEF END */")
    return text[begin:end]


def make_builder() -> cffi.FFI:
    ffi = cffi.FFI()
    ffi.cdef(cdef_text())
    ffi.set_source("netio._native", '#include "netio_native.h"\n')
    return ffi


if __name__ == "__main__":
    out = pathlib.Path(sys.argv[1])
    make_builder().emit_c_code(str(out))
