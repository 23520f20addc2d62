"""Shared helpers of the analyzer tests: compare an analysis with a ground truth."""

from __future__ import annotations

import math
from typing import Any

#: Latency quantiles are reported from a sketch within this relative error of the
#: exact order statistic (the bound README and ``netio-analyze --help`` state).
SKETCH_RELATIVE_ERROR = 1 / 33
_QUANTILES = ("p50", "p90", "p99")
_LATENCIES = ("ack_latency_s", "read_latency_s", "cnp_reaction_s")


def mismatches(got: Any, want: Any, path: str = "") -> list[str]:
    """Every place where ``got`` differs from ``want`` (keys absent from ``want`` ignored)."""
    out: list[str] = []
    leaf = path.rsplit(".", 1)[-1]
    parent = path.rsplit(".", 2)[-2] if path.count(".") >= 2 else ""
    if leaf in _QUANTILES and parent in _LATENCIES and isinstance(want, float):
        if not isinstance(got, int | float) or abs(got - want) > SKETCH_RELATIVE_ERROR * want:
            out.append(f"{path}: {got!r} not within {SKETCH_RELATIVE_ERROR:.4f} of {want!r}")
        return out
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path}: {got!r} is not an object"]
        for k, v in want.items():
            if k not in got:
                out.append(f"{path}.{k}: missing")
            else:
                out += mismatches(got[k], v, f"{path}.{k}")
    elif isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{path}: {got!r} != {want!r}"]
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            out += mismatches(g, w, f"{path}[{i}]")
    elif isinstance(want, float):
        if not isinstance(got, int | float) or not math.isclose(got, want, rel_tol=1e-9,
                                                                 abs_tol=1e-12):
            out.append(f"{path}: {got!r} != {want!r}")
    elif got != want:
        out.append(f"{path}: {got!r} != {want!r}")
    return out


def compare_with_truth(doc: dict[str, Any], truth: dict[str, Any]) -> list[str]:
    out = []
    caps = {c["name"]: c for c in doc["captures"]}
    out += mismatches(caps, truth["captures"], "captures")
    for key in ("pause_senders", "storms", "xon_storms", "spreading"):
        out += mismatches(doc[key], truth[key], key)

    def fkey(f: dict[str, Any]) -> tuple[Any, ...]:
        return (f["capture"], f["src_ip"], f["dst_ip"], f["dest_qp"])

    flows = {fkey(f): f for f in doc["flows"]}
    for f in truth["flows"]:
        if fkey(f) not in flows:
            out.append(f"flow {fkey(f)} not reported")
        else:
            out += mismatches(flows[fkey(f)], f, f"flow{fkey(f)}")
    return out
