"""24-bit packet sequence number arithmetic (IBTA vol 1 §9.7.1).

PSNs wrap at 2**24. Two PSNs are compared by their signed distance modulo
2**24, so a PSN up to 2**23 - 1 ahead counts as "later" (the same rule as
the kernel's ``psn_compare`` in rxe).
"""

from __future__ import annotations

PSN_BITS = 24
PSN_MODULUS = 1 << PSN_BITS
PSN_MASK = PSN_MODULUS - 1
_HALF = 1 << (PSN_BITS - 1)


def psn_add(psn: int, count: int) -> int:
    """``psn + count`` modulo 2**24 (``count`` may be negative)."""
    return (psn + count) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed distance ``a - b`` in [-2**23, 2**23): > 0 when ``a`` is later than ``b``."""
    return ((a - b + _HALF) & PSN_MASK) - _HALF


def psn_in_range(psn: int, first: int, last: int) -> bool:
    """True when ``first <= psn <= last`` in sequence order (a wrapping range)."""
    return psn_diff(psn, first) >= 0 and psn_diff(last, psn) >= 0


def check_psn(psn: int) -> int:
    """Return ``psn`` if it fits 24 bits; raise ValueError otherwise."""
    if not 0 <= psn <= PSN_MASK:
        raise ValueError(f"PSN {psn} does not fit 24 bits")
    return psn
