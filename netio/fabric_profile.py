"""The measured link profile: what ``netio bench --profile`` writes and netio-model reads.

One JSON document describes one link (or one class of links) as measured between
``hosts`` with one ``backend`` on one ``device``/``gid`` at one ``mtu_bytes``:

* ``points``: the sweep, one entry per message size: ``message_bytes``,
  ``latency_s`` (one-way, the median of the latency test at that size) and
  ``bandwidth_bytes_per_s`` (the average of the bandwidth test at that size).
* ``fit``: the Hockney/postal model ``time_s = alpha_s + beta_s_per_byte * bytes``
  fitted to the points: ``alpha_s`` (latency), ``beta_s_per_byte`` (inverse of the
  asymptotic bandwidth) and ``max_relative_error`` (the worst ``|model/measured - 1|``
  over the points, dimensionless).
* ``efficiency``: the achieved fraction of ``1/beta_s_per_byte`` against message size,
  ``message_bytes`` ascending with ``efficiency`` in (0, 1]; between points the model
  interpolates in log(size), outside it holds the end values.
* ``conditions`` (optional): the link's load as seen by the daemon or the analyzer:
  ``pause_fraction`` (0..1 of the time the sender was held by PFC), ``cnp_per_s``
  (congestion notification packets per second), ``retransmission_ratio`` (resent
  packets per packet sent, 0..1).

Versioned by ``schema`` = ``"netio.fabric_profile"`` and ``version`` = ``SCHEMA_VERSION``.
Loading is strict: an unknown, missing or wrongly typed key raises
:class:`netio.errors.FabricProfileError` naming the dotted key and the file.
This module depends on nothing else in netio but ``netio.errors``.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from netio.errors import FabricProfileError

SCHEMA_NAME = "netio.fabric_profile"
SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class ProfilePoint:
    message_bytes: int
    latency_s: float
    bandwidth_bytes_per_s: float


@dataclass(frozen=True, slots=True)
class LinkFit:
    alpha_s: float
    beta_s_per_byte: float
    max_relative_error: float


@dataclass(frozen=True, slots=True)
class EfficiencyPoint:
    message_bytes: int
    efficiency: float


@dataclass(frozen=True, slots=True)
class LinkConditions:
    pause_fraction: float
    cnp_per_s: float
    retransmission_ratio: float


@dataclass(frozen=True, slots=True)
class FabricProfile:
    backend: str
    device: str
    gid: str
    mtu_bytes: int
    hosts: tuple[str, ...]
    points: tuple[ProfilePoint, ...]
    fit: LinkFit
    efficiency: tuple[EfficiencyPoint, ...]
    conditions: LinkConditions | None


class _Reader:
    """Strict access to one JSON object; every error names the dotted key and the file."""

    def __init__(self, data: Mapping[str, Any], prefix: str, path: str) -> None:
        self.data = data
        self.prefix = prefix
        self.path = path
        self.seen: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def fail(self, name: str, reason: str) -> FabricProfileError:
        return FabricProfileError(self.key(name), reason, path=self.path)

    def raw(self, name: str) -> Any:
        self.seen.add(name)
        if name not in self.data:
            raise self.fail(name, "missing")
        return self.data[name]

    def has(self, name: str) -> bool:
        return name in self.data

    def str_(self, name: str) -> str:
        value = self.raw(name)
        if not isinstance(value, str):
            raise self.fail(name, f"must be a string, not {type(value).__name__}")
        return value

    def int_(self, name: str, minimum: int = 0) -> int:
        value = self.raw(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(name, f"must be an integer, not {type(value).__name__}")
        if value < minimum:
            raise self.fail(name, f"must be >= {minimum}, not {value}")
        return value

    def float_(self, name: str, low: float = 0.0, high: float = math.inf,
               low_open: bool = False) -> float:
        value = self.raw(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(name, f"must be a number, not {type(value).__name__}")
        v = float(value)
        if not math.isfinite(v) or v < low or v > high or (low_open and v == low):
            bound = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
            raise self.fail(name, f"must be in {bound}, not {value}")
        return v

    def table(self, name: str) -> _Reader:
        value = self.raw(name)
        if not isinstance(value, dict):
            raise self.fail(name, f"must be an object, not {type(value).__name__}")
        return _Reader(value, f"{self.key(name)}.", self.path)

    def tables(self, name: str) -> list[_Reader]:
        value = self.raw(name)
        if not isinstance(value, list) or not value:
            raise self.fail(name, "must be a non-empty list of objects")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise self.fail(f"{name}[{i}]", f"must be an object, not {type(item).__name__}")
            out.append(_Reader(item, f"{self.key(name)}[{i}].", self.path))
        return out

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise self.fail(unknown[0], "unknown key")


def _ascending(reader: _Reader, name: str, sizes: list[int]) -> None:
    if any(b <= a for a, b in itertools.pairwise(sizes)):
        raise reader.fail(name, "message_bytes must be strictly ascending")


def profile_from_dict(data: Mapping[str, Any], path: str = "<profile>") -> FabricProfile:
    """Build a profile from its JSON object, strictly (see the module doc)."""
    if not isinstance(data, Mapping):
        raise FabricProfileError("", "a fabric profile is a JSON object", path=path)
    r = _Reader(data, "", path)
    if r.str_("schema") != SCHEMA_NAME:
        raise r.fail("schema", f"must be {SCHEMA_NAME!r}")
    version = r.int_("version")
    if version != SCHEMA_VERSION:
        raise r.fail("version", f"this netio reads version {SCHEMA_VERSION}, not {version}")
    backend, device, gid = r.str_("backend"), r.str_("device"), r.str_("gid")
    mtu = r.int_("mtu_bytes", 1)
    hosts_raw = r.raw("hosts")
    if not isinstance(hosts_raw, list) or not all(isinstance(h, str) for h in hosts_raw):
        raise r.fail("hosts", "must be a list of host names")
    points = []
    for p in r.tables("points"):
        points.append(ProfilePoint(p.int_("message_bytes", 1),
                                   p.float_("latency_s", 0, low_open=True),
                                   p.float_("bandwidth_bytes_per_s", 0, low_open=True)))
        p.done()
    _ascending(r, "points", [p.message_bytes for p in points])
    f = r.table("fit")
    fit = LinkFit(f.float_("alpha_s"), f.float_("beta_s_per_byte", 0, low_open=True),
                  f.float_("max_relative_error"))
    f.done()
    eff = []
    for e in r.tables("efficiency"):
        eff.append(EfficiencyPoint(e.int_("message_bytes", 1), e.float_("efficiency", 0, 1, True)))
        e.done()
    _ascending(r, "efficiency", [e.message_bytes for e in eff])
    conditions = None
    if r.has("conditions"):
        c = r.table("conditions")
        conditions = LinkConditions(c.float_("pause_fraction", 0, 1), c.float_("cnp_per_s"),
                                    c.float_("retransmission_ratio", 0, 1))
        c.done()
    r.done()
    return FabricProfile(backend, device, gid, mtu, tuple(hosts_raw), tuple(points), fit,
                         tuple(eff), conditions)


def load_fabric_profile(path: str | Path) -> FabricProfile:
    """Read a profile file; any problem is a FabricProfileError naming the file and key."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise FabricProfileError("", f"cannot read: {exc.strerror or exc}", path=name) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FabricProfileError("", f"not JSON: {exc.msg} at line {exc.lineno}",
                                 path=name) from None
    return profile_from_dict(data, name)


def profile_to_dict(profile: FabricProfile) -> dict[str, Any]:
    """The JSON object of a profile (the inverse of :func:`profile_from_dict`)."""
    out: dict[str, Any] = {
        "schema": SCHEMA_NAME, "version": SCHEMA_VERSION, "backend": profile.backend,
        "device": profile.device, "gid": profile.gid, "mtu_bytes": profile.mtu_bytes,
        "hosts": list(profile.hosts),
        "points": [{"message_bytes": p.message_bytes, "latency_s": p.latency_s,
                    "bandwidth_bytes_per_s": p.bandwidth_bytes_per_s} for p in profile.points],
        "fit": {"alpha_s": profile.fit.alpha_s, "beta_s_per_byte": profile.fit.beta_s_per_byte,
                "max_relative_error": profile.fit.max_relative_error},
        "efficiency": [{"message_bytes": e.message_bytes, "efficiency": e.efficiency}
                       for e in profile.efficiency],
    }
    if profile.conditions is not None:
        c = profile.conditions
        out["conditions"] = {"pause_fraction": c.pause_fraction, "cnp_per_s": c.cnp_per_s,
                             "retransmission_ratio": c.retransmission_ratio}
    return out


def fit_alpha_beta(sizes: Sequence[float], times: Sequence[float]) -> tuple[float, float]:
    """The link fit of this schema: least-squares ``(alpha, beta)`` of ``t = alpha + beta n``
    on the *relative* error (each size weighs the same, whether it takes 2 us or 2 ms),
    ``alpha = 0`` refit when noise makes it negative. ``netio bench --profile`` writes it
    and ``netio-model calibrate`` refits it with this one function."""
    n = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    if n.size < 2 or np.any(t <= 0) or np.unique(n).size < 2:
        raise FabricProfileError("points", "need at least two sizes with positive latencies")
    a = np.stack([1.0 / t, n / t], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if alpha < 0.0 or beta <= 0.0:
        x = n / t
        alpha, beta = 0.0, float(np.sum(x) / np.sum(x * x))
    if beta <= 0.0:
        raise FabricProfileError("points", "latency does not grow with size: no bandwidth "
                                 "to fit")
    return float(alpha), float(beta)
