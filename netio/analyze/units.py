"""Parsing and formatting of the quantities the analyzer's options and reports use.

Bit rates (``100G``, ``25Gbps``, ``400e9``), durations (``200ms``, ``50us``,
``1.5s``, plain numbers are seconds), MAC addresses as 48-bit integers, and
IPv4/IPv6 addresses as integers, human renderings with units (``12.5 ms``, ``3.20 Gb/s``).
"""

from __future__ import annotations

import re
from ipaddress import IPv6Address

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGtT]?)"
                   r"(?:b(?:ps|it/s|/s)?|bps)?\s*$")
_RATE_SCALE = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(ns|us|µs|ms|s|)\s*$")
_DURATION_SCALE = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "": 1.0}


def parse_bitrate(text: str) -> int:
    """``"100G"`` → 100_000_000_000 bit/s (k/M/G/T are powers of 1000)."""
    m = _RATE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a bit rate (e.g. 100G, 25Gbps, 400e9)")
    value = round(float(m.group(1)) * _RATE_SCALE[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"bit rate {text!r} must be positive")
    return value


def parse_duration(text: str) -> float:
    """``"200ms"`` → 0.2 (seconds); a bare number is seconds."""
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a duration (e.g. 200ms, 50us, 1.5s)")
    return float(m.group(1)) * _DURATION_SCALE[m.group(2)]


def mac_to_int(text: str | bytes | int) -> int:
    """A MAC (``"02:00:00:00:00:01"``, 6 bytes, or an int) as a 48-bit integer."""
    if isinstance(text, int) and not isinstance(text, bool):
        if not 0 <= text < 1 << 48:
            raise ValueError(f"MAC {text} does not fit in 48 bits")
        return text
    if isinstance(text, bytes):
        if len(text) != 6:
            raise ValueError(f"MAC must be 6 bytes, got {len(text)}")
        return int.from_bytes(text, "big")
    if not isinstance(text, str):
        raise TypeError(f"MAC must be a string, got {type(text).__name__}")
    parts = re.split(r"[:-]", text.strip())
    if len(parts) != 6 or not all(re.fullmatch(r"[0-9a-fA-F]{1,2}", p) for p in parts):
        raise ValueError(f"{text!r} is not a MAC address")
    return int("".join(p.zfill(2) for p in parts), 16)


def format_mac_int(mac: int) -> str:
    """``aa:bb:cc:dd:ee:ff`` of the low 48 bits (one format, then slices: this runs for
    every pause event and flow of a capture)."""
    h = f"{mac & 0xFFFF_FFFF_FFFF:012x}"
    return f"{h[0:2]}:{h[2:4]}:{h[4:6]}:{h[6:8]}:{h[8:10]}:{h[10:12]}"


def format_ipv4_int(ip: int) -> str:
    return f"{ip >> 24 & 255}.{ip >> 16 & 255}.{ip >> 8 & 255}.{ip & 255}"


def format_ip_int(ip: int, v6: bool) -> str:
    """An IPv4 (32-bit) or IPv6 (128-bit, RFC 5952 text) address held as an integer."""
    if not v6:
        return format_ipv4_int(ip)
    return str(IPv6Address(ip))


def human_duration(seconds: float) -> str:
    s = abs(seconds)
    if s == 0:
        return "0 s"
    if s < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if s < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if s < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.3f} s"


def human_rate(bps: float) -> str:
    for scale, unit in ((1e12, "Tb/s"), (1e9, "Gb/s"), (1e6, "Mb/s"), (1e3, "kb/s")):
        if bps >= scale:
            return f"{bps / scale:.2f} {unit}"
    return f"{bps:.0f} b/s"


def human_bytes(n: float) -> str:
    for scale, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"
