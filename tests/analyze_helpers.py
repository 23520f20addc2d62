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


#: Sections of the document the truth states in full: an entry the analysis reports
#: that the truth lacks is a spurious finding and fails.
SECTIONS = ("pause_senders", "storms", "xon_storms", "spreading")


def compare_with_truth(doc: dict[str, Any], truth: dict[str, Any]) -> list[str]:
    """Every difference between an analysis and the truth, both ways: a capture, flow,
    pause sender, storm or chain the analysis reports and the truth lacks is an error,
    as is one the truth has and the analysis misses."""
    out = []
    caps = {c["name"]: c for c in doc["captures"]}
    out += mismatches(caps, truth["captures"], "captures")
    out += [f"capture {name!r} reported, not in the truth" for name in caps
            if name not in truth["captures"]]
    for key in SECTIONS:
        out += mismatches(doc[key], truth[key], key)  # lists: lengths must agree
    for key, order in (("incast", ("capture", "destination", "start_s")),
                       ("fairness", ("capture", "group", "key"))):
        def ordered(xs: list[dict[str, Any]], order: tuple[str, ...] = order
                    ) -> list[dict[str, Any]]:
            return sorted(xs, key=lambda x: tuple(x[k] for k in order))
        if key in truth:
            out += mismatches(ordered(doc[key]), ordered(truth[key]), key)
        elif doc[key]:
            out.append(f"{key}: {len(doc[key])} reported, the truth has none")

    def fkey(f: dict[str, Any]) -> tuple[Any, ...]:
        return (f["capture"], f["src_ip"], f["dst_ip"], f["dest_qp"])

    flows = {fkey(f): f for f in doc["flows"]}
    wanted = {fkey(f) for f in truth["flows"]}
    for f in truth["flows"]:
        if fkey(f) not in flows:
            out.append(f"flow {fkey(f)} not reported")
        else:
            out += mismatches(flows[fkey(f)], f, f"flow{fkey(f)}")
    out += [f"flow {k} reported, not in the truth" for k in flows if k not in wanted]
    kinds = sorted({f["kind"] for f in doc["findings"]})
    if kinds != truth["finding_kinds"]:
        out.append(f"finding kinds {kinds} != {truth['finding_kinds']}")
    return out
