"""From bench sweeps to the fabric profile the performance models read.

The profile's model of a message of ``n`` bytes is ``alpha_s + beta_s_per_byte * n``.
``beta_s_per_byte`` is the inverse of the best bandwidth the streaming test reached (what
pipelined transfers, and so collectives, can get); ``alpha_s`` is then the weighted
least-squares intercept of the one-way latencies with beta fixed, minimising the
relative error ``sum(((alpha + beta n) / t - 1)^2)``, so that small messages, whose
time is all latency, count as much as large ones. The fit's worst relative error over
the sizes is kept beside it, and the efficiency at each size is the bandwidth reached
there times beta (the fraction of the asymptote, in (0, 1]).
"""

from __future__ import annotations

from collections.abc import Sequence

from netio.errors import IoError
from netio.fabric_profile import (
    EfficiencyPoint,
    FabricProfile,
    LinkFit,
    ProfilePoint,
)
from netio.perf.spec import BandwidthResult, LatencyResult


def fit_link(sizes_bytes: Sequence[int], latency_s: Sequence[float],
             bandwidth_bytes_per_s: Sequence[float]) -> LinkFit:
    """alpha and beta as the module docstring says, with the worst relative error."""
    if not sizes_bytes or not (len(sizes_bytes) == len(latency_s)
                               == len(bandwidth_bytes_per_s)):
        raise IoError("a link fit needs one latency and one bandwidth per size")
    if min(latency_s) <= 0 or min(bandwidth_bytes_per_s) <= 0:
        raise IoError("a link fit needs positive latencies and bandwidths")
    beta = 1.0 / max(bandwidth_bytes_per_s)
    weights = [1.0 / (t * t) for t in latency_s]
    alpha = sum(w * (t - beta * n) for w, t, n in zip(weights, latency_s, sizes_bytes,
                                                      strict=True)) / sum(weights)
    alpha = max(alpha, 0.0)
    error = max(abs((alpha + beta * n) / t - 1.0) for t, n in zip(latency_s, sizes_bytes,
                                                                  strict=True))
    return LinkFit(alpha, beta, error)


def build_profile(latency: Sequence[LatencyResult], bandwidth: Sequence[BandwidthResult], *,
                  backend: str, device: str, gid: str, mtu_bytes: int,
                  hosts: tuple[str, ...]) -> FabricProfile:
    """A profile from a latency sweep and a bandwidth sweep over the same sizes."""
    by_size = {r.size_bytes: r for r in bandwidth}
    sizes = [r.size_bytes for r in latency if r.size_bytes in by_size]
    if len(sizes) < 2:
        raise IoError("a profile needs the latency and bandwidth sweeps to share at least "
                      "two message sizes")
    lat_s = [next(r for r in latency if r.size_bytes == n).t_typical_us / 1e6 for n in sizes]
    bw = [by_size[n].bandwidth_bytes_per_s for n in sizes]
    fit = fit_link(sizes, lat_s, bw)
    points = tuple(ProfilePoint(n, t, b) for n, t, b in zip(sizes, lat_s, bw, strict=True))
    efficiency = tuple(EfficiencyPoint(n, min(1.0, b * fit.beta_s_per_byte))
                       for n, b in zip(sizes, bw, strict=True))
    return FabricProfile(backend, device, gid, mtu_bytes, hosts, points, fit, efficiency,
                         None)


__all__ = ["build_profile", "fit_link"]
