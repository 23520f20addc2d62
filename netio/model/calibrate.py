"""Calibration: fit a link's alpha, beta and efficiency curve from a netio fabric profile
(what ``netio bench --profile`` and the daemon write), and a machine's compute from
micro-benchmarks; write a system file the other subcommands accept.

**Network.** The Hockney model ``t(n) = alpha + beta n`` is fitted to the profile's
one-way latencies by least squares on the *relative* error (each point weighs the same,
whether it is 2 us or 2 ms): minimise ``sum((alpha + beta n_i) / t_i - 1)^2``, linear in
``(alpha, beta)``; a negative ``alpha`` (noise at small sizes) is refitted with
``alpha = 0``. The efficiency curve is the achieved fraction of ``1 / beta`` at each size,
``bandwidth_i * beta`` (capped to 1), as :mod:`netio.fabric_profile` defines it. The fit
error per size is ``|model / measured - 1|`` for the latency and for the bandwidth the
Hockney model implies without the curve (``n / (alpha + beta n)``).

**Compute.** :func:`compute_system` turns measured GEMM FLOP/s against size and memory
bandwidth against size into an accelerator: the peak is the best measured rate (a CPU's
datasheet peak is rarely reached by a BLAS on a shared machine; the curve then says how
much of the best each size gets), the curves are the measured fractions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netio.fabric_profile import FabricProfile, fit_alpha_beta
from netio.model.schema import Curve, System, Topology, system_from_dict


@dataclass(frozen=True, slots=True)
class SizeError:
    message_bytes: int
    latency_s: float
    model_latency_s: float
    latency_error: float
    bandwidth_bytes_per_s: float
    model_bandwidth_bytes_per_s: float
    bandwidth_error: float
    efficiency: float


@dataclass(frozen=True, slots=True)
class LinkCalibration:
    alpha_s: float
    beta_s_per_byte: float
    efficiency: Curve
    per_size: tuple[SizeError, ...]
    source: str

    @property
    def bandwidth_bits_per_s(self) -> float:
        return 8.0 / self.beta_s_per_byte

    @property
    def max_latency_error(self) -> float:
        return max(e.latency_error for e in self.per_size)

    def to_json_dict(self) -> dict[str, object]:
        return {
            "source": self.source, "alpha_s": self.alpha_s,
            "beta_s_per_byte": self.beta_s_per_byte,
            "bandwidth_bits_per_s": self.bandwidth_bits_per_s,
            "max_latency_error_ratio": self.max_latency_error,
            "sizes": [{"message_bytes": e.message_bytes, "latency_s": e.latency_s,
                       "model_latency_s": e.model_latency_s,
                       "latency_error_ratio": e.latency_error,
                       "bandwidth_bytes_per_s": e.bandwidth_bytes_per_s,
                       "model_bandwidth_bytes_per_s": e.model_bandwidth_bytes_per_s,
                       "bandwidth_error_ratio": e.bandwidth_error,
                       "efficiency_ratio": e.efficiency} for e in self.per_size],
        }

    def to_text(self) -> str:
        lines = [f"calibrated from {self.source}: alpha {self.alpha_s * 1e6:.3f} us, beta "
                 f"{self.beta_s_per_byte * 1e12:.4f} ps/B ({self.bandwidth_bits_per_s / 1e9:.2f}"
                 " Gb/s)",
                 f"{'size[B]':>12}{'lat[us]':>11}{'model[us]':>11}{'err':>8}"
                 f"{'bw[GB/s]':>11}{'hockney[GB/s]':>15}{'err':>8}{'eff':>7}"]
        for e in self.per_size:
            lines.append(f"{e.message_bytes:>12}{e.latency_s * 1e6:>11.3f}"
                         f"{e.model_latency_s * 1e6:>11.3f}{e.latency_error:>8.1%}"
                         f"{e.bandwidth_bytes_per_s / 1e9:>11.3f}"
                         f"{e.model_bandwidth_bytes_per_s / 1e9:>15.3f}"
                         f"{e.bandwidth_error:>8.1%}{e.efficiency:>7.3f}")
        return "\n".join(lines)


def calibrate_link(profile: FabricProfile, source: str = "<profile>") -> LinkCalibration:
    """Fit a profile's points (module doc)."""
    pts = profile.points
    alpha, beta = fit_alpha_beta([p.message_bytes for p in pts], [p.latency_s for p in pts])
    errs = []
    for p in pts:
        model_t = alpha + beta * p.message_bytes
        model_bw = p.message_bytes / model_t
        eff = min(p.bandwidth_bytes_per_s * beta, 1.0)
        errs.append(SizeError(p.message_bytes, p.latency_s, model_t,
                              abs(model_t / p.latency_s - 1.0), p.bandwidth_bytes_per_s,
                              model_bw, abs(model_bw / p.bandwidth_bytes_per_s - 1.0),
                              max(eff, 1e-6)))
    curve = Curve(tuple(float(e.message_bytes) for e in errs),
                  tuple(e.efficiency for e in errs))
    return LinkCalibration(alpha, beta, curve, tuple(errs), source)


# --- writing a system file ----------------------------------------------------------


def _curve(c: Curve) -> list[list[float]]:
    return [[s, f] for s, f in zip(c.sizes, c.fractions, strict=True)]


def system_to_dict(system: System) -> dict[str, Any]:
    """The document :func:`netio.model.schema.system_from_dict` reads back to ``system``
    (the network as line rates; a fabric profile's fit is written as the NIC's)."""
    acc, node, fab = system.accelerator, system.node, system.fabric
    out: dict[str, Any] = {
        "name": system.name,
        "accelerator": {
            "name": acc.name, "memory_bytes": acc.memory_bytes,
            "memory_bandwidth_bytes_per_s": acc.memory_bandwidth_bytes_per_s,
            "peak_flops_per_s": dict(acc.peak_flops_per_s),
            "matmul_efficiency_by_flops": _curve(acc.matmul_efficiency),
            "memory_efficiency_by_bytes": _curve(acc.memory_efficiency),
            "fused_attention_efficiency": acc.fused_attention_efficiency,
            **({} if acc.attention_score_efficiency is None
               or acc.attention_over_value_efficiency is None else {
                   "attention_score_efficiency_by_head_dim":
                       _curve(acc.attention_score_efficiency),
                   "attention_over_value_efficiency_by_head_dim":
                       _curve(acc.attention_over_value_efficiency)}),
            **({} if acc.streaming_multiprocessors is None else {
                "streaming_multiprocessors": acc.streaming_multiprocessors})},
        "node": {
            "accelerators": node.accelerators,
            "scaleup_bandwidth_bytes_per_s": 1.0 / node.scale_up.beta_s_per_byte,
            "scaleup_latency_s": node.scale_up.alpha_s,
            "scaleup_efficiency_by_bytes": _curve(node.scale_up.efficiency),
            "nics": node.nics,
            "nic_bandwidth_bits_per_s": 8.0 / node.scale_out.beta_s_per_byte,
            "nic_latency_s": node.scale_out.alpha_s,
            "nic_efficiency_by_bytes": _curve(node.scale_out.efficiency)},
        "fabric": {"topology": Topology(fab.topology).name.lower(),
                   "nodes_per_leaf": fab.nodes_per_leaf,
                   "oversubscription_ratio": fab.oversubscription_ratio},
    }
    ws = system.weight_streaming
    if ws is not None:
        out["weight_streaming"] = {
            "external_memory_bytes": ws.external_memory_bytes,
            "stream_bandwidth_bytes_per_s": ws.stream_bandwidth_bytes_per_s,
            "stream_latency_s": ws.stream_latency_s,
            "reduction_tree_fanout": ws.reduction_tree_fanout,
            "optimizer_on_memory_service": ws.optimizer_on_memory_service}
    if system.unpublished:
        out["unpublished"] = list(system.unpublished)
    return out


def calibrated_system(base: System, link: LinkCalibration, name: str | None = None
                      ) -> dict[str, Any]:
    """``base`` with its NICs replaced by the calibrated link, as a system document."""
    doc = system_to_dict(base)
    doc["name"] = name or f"{base.name}-calibrated"
    doc["node"]["nic_bandwidth_bits_per_s"] = link.bandwidth_bits_per_s
    doc["node"]["nic_latency_s"] = link.alpha_s
    doc["node"]["nic_efficiency_by_bytes"] = _curve(link.efficiency)
    if "unpublished" in doc:  # the NIC is measured now, whatever the base file said
        doc["unpublished"] = [k for k in doc["unpublished"] if not k.startswith("node.nic_")]
    system_from_dict(doc, "<calibrated system>")  # it must read back
    return doc


def write_system(doc: dict[str, Any], path: str | Path) -> Path:
    out = Path(path)
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return out


# --- compute from micro-benchmarks ---------------------------------------------------


def compute_system(name: str, gemm: Sequence[tuple[float, float]],
                   copy: Sequence[tuple[float, float]], memory_bytes: float,
                   dtype: str = "fp32") -> System:
    """A one-accelerator system from measured ``(flops, flops_per_s)`` of GEMMs and
    ``(bytes, bytes_per_s)`` of memory copies (module doc). The network is a placeholder
    (one node, no NIC traffic expected)."""
    g = sorted(gemm)
    c = sorted(copy)
    peak = max(r for _, r in g)
    bw = max(r for _, r in c)

    def curve(pairs: Sequence[tuple[float, float]], top: float) -> list[list[float]]:
        out: list[list[float]] = []
        for size, rate in pairs:
            if out and size <= out[-1][0]:
                continue
            out.append([size, max(min(rate / top, 1.0), 1e-6)])
        return out

    doc = {
        "name": name,
        "accelerator": {"name": name, "memory_bytes": memory_bytes,
                        "memory_bandwidth_bytes_per_s": bw,
                        "peak_flops_per_s": {dtype: peak},
                        "matmul_efficiency_by_flops": curve(g, peak),
                        "memory_efficiency_by_bytes": curve(c, bw),
                        # numpy has no fused attention: its GEMMs run at the best rate
                        "fused_attention_efficiency": 1.0},
        "node": {"accelerators": 1, "scaleup_bandwidth_bytes_per_s": bw,
                 "scaleup_latency_s": 1e-6, "scaleup_efficiency_by_bytes": [[1.0, 1.0]],
                 "nics": 1, "nic_bandwidth_bits_per_s": 1e9, "nic_latency_s": 1e-5,
                 "nic_efficiency_by_bytes": [[1.0, 1.0]]},
        "fabric": {"topology": "single_switch", "nodes_per_leaf": 1,
                   "oversubscription_ratio": 1.0},
    }
    return system_from_dict(doc, f"<{name}>")
