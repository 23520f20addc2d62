"""The ``NETIO_*`` environment variables that tune the data path: one reader, one error.

A value that cannot be read is refused with a :class:`~netio.errors.ConfigError` naming the
variable and what it holds, never silently replaced by the default (a typo in a tuning knob
would otherwise measure the default while the user believes otherwise).
"""

from __future__ import annotations

import os
from enum import Enum
from typing import TypeVar

from netio.errors import ConfigError

E = TypeVar("E", bound=Enum)


def microseconds(name: str, default_us: int) -> int:
    """``$name`` as a whole number of microseconds >= 0, or ``default_us`` when unset/empty."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default_us
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(name, f"{text!r} is not a whole number of microseconds") from None
    if value < 0:
        raise ConfigError(name, f"{value} microseconds is negative (0 turns it off)")
    return value


def choice(name: str, kind: type[E], default: E) -> E:
    """``$name`` as one of ``kind``'s values (case-insensitive), or ``default`` when
    unset/empty."""
    text = os.environ.get(name, "").strip().lower()
    if not text:
        return default
    try:
        return kind(text)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in kind)
        raise ConfigError(name, f"{text!r} is not one of {allowed}") from None
