"""Access to the compiled hot paths (netio._native), with a pure-Python fallback.

Every native function has a pure-Python reference next to its caller; tests
prove the two agree. Set ``NETIO_PURE=1`` to force the references (useful for
debugging and for the parity tests).
"""

from __future__ import annotations

import os
from typing import Any

ffi: Any
lib: Any

if os.environ.get("NETIO_PURE") == "1":
    ffi = None
    lib = None
else:
    try:
        from netio._native import ffi, lib
    except ImportError:  # built without a compiler, or imported from a bare source tree
        ffi = None
        lib = None

#: True when the compiled module is loaded and in use.
AVAILABLE: bool = lib is not None
