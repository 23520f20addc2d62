"""Access to the compiled hot paths (netio._native), with a pure-Python fallback.

Every native function has a pure-Python reference next to its caller; tests
prove the two agree. Set ``NETIO_PURE=1`` to force the references (useful for
debugging and for the parity tests).
"""

from __future__ import annotations

import importlib
import os
from typing import Any


def _load() -> tuple[Any, Any]:
    if os.environ.get("NETIO_PURE") == "1":
        return None, None
    try:
        module = importlib.import_module("netio._native")
    except ImportError:  # built without a compiler, or imported from a bare source tree
        return None, None
    return module.ffi, module.lib


ffi: Any
lib: Any
ffi, lib = _load()

#: True when the compiled module is loaded and in use.
AVAILABLE: bool = lib is not None
