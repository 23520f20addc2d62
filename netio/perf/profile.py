"""From bench sweeps to the fabric profile the performance models read: the one-way
latencies and streaming bandwidths against size, and the schema's link fit
(:func:`netio.fabric_profile.fit_alpha_beta`) with its worst relative error over the sizes;
the efficiency at each size is the bandwidth reached there times beta, capped to 1.
"""

from __future__ import annotations

from collections.abc import Sequence

from netio.errors import IoError
from netio.fabric_profile import (
    EfficiencyPoint,
    FabricProfile,
    LinkFit,
    ProfilePoint,
    fit_alpha_beta,
)
from netio.perf.spec import BandwidthResult, LatencyResult


def fit_link(sizes_bytes: Sequence[int], latency_s: Sequence[float]) -> LinkFit:
    """The schema's fit of the latencies, with its worst relative error."""
    alpha, beta = fit_alpha_beta(sizes_bytes, latency_s)
    error = max(abs((alpha + beta * n) / t - 1.0)
                for t, n in zip(latency_s, sizes_bytes, strict=True))
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
    fit = fit_link(sizes, lat_s)
    points = tuple(ProfilePoint(n, t, b) for n, t, b in zip(sizes, lat_s, bw, strict=True))
    efficiency = tuple(EfficiencyPoint(n, min(1.0, b * fit.beta_s_per_byte))
                       for n, b in zip(sizes, bw, strict=True))
    return FabricProfile(backend, device, gid, mtu_bytes, hosts, points, fit, efficiency,
                         None)


__all__ = ["build_profile", "fit_link"]
