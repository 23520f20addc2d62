"""Field validation shared by the header dataclasses of netio.wire.

Headers check their fields in ``__post_init__`` with one compound comparison
(cheap enough for the decode hot path); only when that fails do they call
:func:`out_of_range` to find and name the offending field.
"""

from __future__ import annotations

from netio.errors import EncodeError

#: (field name, width in bits) of the unsigned integer fields of a header.
FieldSpec = tuple[tuple[str, int], ...]


def out_of_range(header: str, obj: object, spec: FieldSpec) -> EncodeError:
    """Return the EncodeError naming the first field of ``obj`` that does not fit ``spec``."""
    for name, bits in spec:
        value = getattr(obj, name)
        if not isinstance(value, int):
            return EncodeError(header, f"{name}={value!r} is not an integer")
        if value < 0 or value >> bits:
            return EncodeError(header, f"{name}={value} does not fit in {bits} bits")
    return EncodeError(header, "field out of range")


def check_mac(header: str, name: str, value: object) -> None:
    """Raise EncodeError unless ``value`` is a 6-byte MAC address."""
    if not isinstance(value, bytes) or len(value) != 6:
        raise EncodeError(header, f"{name}={value!r} is not a 6-byte MAC address")


def check_bytes(header: str, name: str, value: object, size: int) -> None:
    """Raise EncodeError unless ``value`` is ``bytes`` of exactly ``size`` bytes."""
    if not isinstance(value, bytes) or len(value) != size:
        raise EncodeError(header, f"{name} must be {size} bytes, got {value!r}")
