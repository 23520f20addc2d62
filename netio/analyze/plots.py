"""PNG charts of one analysis result, and the exact series each chart draws.

The series are computed here without matplotlib (``throughput_series``,
``ecn_series``, ``pause_rows``), so tests check what is drawn, not only that
a PNG exists; ``write_plots`` draws them.

Time series are per window of ``interval_s`` counted from ``time_origin_ns``
and are drawn as steps: a window's value holds over the whole window. Windows
absent from the document's sparse per-flow throughput series carried no data
and are drawn as zero, over the whole span of the flow's capture (first to
last packet), so a pause shows as a drop to zero, not as a line across it.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Flows drawn in ``flow_throughput.png`` (the largest by bytes).
TOP_FLOWS = 8
#: Captures drawn in ``ce_cnp.png`` (those with the most CE marks and CNPs).
TOP_CAPTURES = 8


@dataclass(frozen=True, slots=True)
class StepSeries:
    """A piecewise-constant series: ``values[i]`` holds from ``edges_s[i]`` to ``edges_s[i + 1]``.

    Runs of empty windows are one step of 0, so the length grows with the
    windows that carry something, not with the span.
    """

    label: str
    edges_s: tuple[float, ...]
    values: tuple[float, ...]

    def at(self, t_s: float) -> float:
        """The value drawn at time ``t_s`` (0 outside the series)."""
        i = bisect_right(self.edges_s, t_s) - 1
        return self.values[i] if 0 <= i < len(self.values) else 0.0

    def between(self, start_s: float, end_s: float) -> list[float]:
        """The values of every step that overlaps ``[start_s, end_s)``."""
        return [v for i, v in enumerate(self.values)
                if self.edges_s[i] < end_s and self.edges_s[i + 1] > start_s]


def window_steps(label: str, windows: Sequence[int], values: Sequence[float],
                 interval_s: float, first_window: int, end_window: int) -> StepSeries:
    """Steps over windows ``first_window``..``end_window - 1`` from sparse (window, value)
    pairs in ascending window order; windows not given are 0."""
    if windows:  # a consistent document has none outside the span; never cut one off
        first_window = min(first_window, windows[0])
        end_window = max(end_window, windows[-1] + 1)
    end_window = max(end_window, first_window + 1)
    edges: list[float] = []
    out: list[float] = []
    cur = first_window
    for w, v in zip(windows, values, strict=True):
        if w > cur:  # a run of empty windows: one step of 0
            edges.append(cur * interval_s)
            out.append(0.0)
        edges.append(w * interval_s)
        out.append(float(v))
        cur = w + 1
    if cur < end_window:
        edges.append(cur * interval_s)
        out.append(0.0)
    edges.append(end_window * interval_s)
    return StepSeries(label, tuple(edges), tuple(out))


def _window_span(capture: dict[str, Any], interval_s: float) -> tuple[int, int]:
    """The windows a capture covers: from its first packet's to its last packet's."""
    first = math.floor(capture["first_ts_s"] / interval_s + 1e-9)
    last = math.floor(capture["last_ts_s"] / interval_s + 1e-9)
    return first, last + 1


def _captures(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in doc["captures"]}


def flow_label(f: dict[str, Any]) -> str:
    return f"{f['src_ip']}->{f['dst_ip']} qp 0x{f['dest_qp']:x}"


@dataclass(frozen=True, slots=True)
class DataStream:
    """One direction of a flow that carried data, as ``flow_throughput.png`` lists it."""

    capture: str
    label: str
    data_bytes: int  # over the windows of its throughput series
    throughput: dict[str, Any]  # the document's {interval_s, start_s[], bps[]}


def data_streams(doc: dict[str, Any]) -> list[DataStream]:
    """Every flow direction that carried data (a flow's requests, and its reverse's
    responses: READ data flows back to the requester), the most data first."""
    out = []
    for f in doc["flows"]:
        dirs = [(flow_label(f), f["throughput"])]
        r = f["reverse"]
        if r is not None and r.get("throughput"):
            kind = "READ responses" if f["read_responses"] else "responses"
            dirs.append((f"{f['dst_ip']}->{f['src_ip']} qp 0x{r['dest_qp']:x} ({kind})",
                         r["throughput"]))
        for label, t in dirs:
            data = round(sum(t["bps"]) * t["interval_s"] / 8)
            if data:
                out.append(DataStream(f["capture"], label, data, t))
    out.sort(key=lambda d: -d.data_bytes)
    return out


def throughput_series(doc: dict[str, Any], stream: DataStream) -> StepSeries:
    """What ``flow_throughput.png`` draws for ``stream``: Gb/s per window over its capture."""
    t = stream.throughput
    dt = t["interval_s"]
    first, end = _window_span(_captures(doc)[stream.capture], dt)
    windows = [round(x / dt) for x in t["start_s"]]
    return window_steps(stream.label, windows, [b / 1e9 for b in t["bps"]], dt, first, end)


def plotted_throughput(doc: dict[str, Any], n: int = TOP_FLOWS
                       ) -> tuple[list[tuple[str, StepSeries]], int]:
    """The (capture, series) pairs ``flow_throughput.png`` draws (the ``n`` streams with the
    most data) and how many streams carried data in all."""
    streams = data_streams(doc)
    return [(d.capture, throughput_series(doc, d)) for d in streams[:n]], len(streams)


def ecn_series(doc: dict[str, Any], capture: str) -> tuple[StepSeries, StepSeries]:
    """What ``ce_cnp.png`` draws for ``capture``: CE marks and CNPs per window, over the
    capture's span."""
    s = doc["ecn_series"][capture]
    dt = s["interval_s"]
    first, end = _window_span(_captures(doc)[capture], dt)
    out = []
    for key, name in (("ce_packets", "CE-marked packets"), ("cnps", "CNPs")):
        counts = s[key]
        nz = [i for i, v in enumerate(counts) if v]
        out.append(window_steps(name, nz, [counts[i] for i in nz], dt, first, end))
    return out[0], out[1]


@dataclass(frozen=True, slots=True)
class PauseRow:
    """One line of ``pause_timeline.png``: a sender's queue (capture, MAC, priority)."""

    label: str
    paused_s: tuple[tuple[float, float], ...]  # every paused interval
    storms_s: tuple[tuple[float, float], ...]  # PFC storms (start, end)
    detected_s: tuple[float, ...]  # when each storm was detected (watchdog time)
    xon_storms_s: tuple[tuple[float, float], ...]


def _queue(x: dict[str, Any]) -> tuple[Any, ...]:
    return (x["capture"], x["src_mac"], x["vlan"], x["kind"], x["priority"])


def _prio(x: dict[str, Any]) -> str:
    return "PAUSE (all priorities)" if x["priority"] is None else f"prio {x['priority']}"


def pause_rows(doc: dict[str, Any]) -> list[PauseRow]:
    """The rows of ``pause_timeline.png``, the earliest pause first."""
    storms: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for s in doc["storms"]:
        storms.setdefault(_queue(s), []).append(s)
    xon: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for s in doc["xon_storms"]:
        xon.setdefault(_queue(s), []).append(s)
    rows = []
    for p in doc["pause_senders"]:
        q = _queue(p)
        st = sorted(storms.get(q, []), key=lambda s: s["start_s"])
        rows.append(PauseRow(
            f"{p['capture']} {p['src_mac']} {_prio(p)}",
            tuple((s, e) for s, e in p["intervals"]),
            tuple((s["start_s"], s["end_s"]) for s in st),
            tuple(s["detected_s"] for s in st),
            tuple((s["start_s"], s["end_s"]) for s in xon.get(q, []))))
    inf = float("inf")
    rows.sort(key=lambda r: min([s for s, _ in r.paused_s + r.xon_storms_s], default=inf))
    return rows


def capture_span_s(doc: dict[str, Any]) -> tuple[float, float]:
    """From the earliest first packet to the latest last packet of the readable captures."""
    caps = [c for c in doc["captures"] if c["readable"] and c["packets"]]
    if not caps:
        return 0.0, 0.0
    return min(c["first_ts_s"] for c in caps), max(c["last_ts_s"] for c in caps)


def _draw_steps(ax: Any, s: StepSeries, **kw: Any) -> None:
    ax.step(s.edges_s, [*s.values, s.values[-1]], where="post", label=s.label, **kw)


def _set_span(ax: Any, span: tuple[float, float]) -> None:
    lo, hi = span
    pad = max(hi - lo, 1e-6) * 0.01
    ax.set_xlim(lo - pad, hi + pad)


def _paused_union(doc: dict[str, Any], capture: str) -> list[tuple[float, float]]:
    ivs = sorted((s, e) for p in doc["pause_senders"] if p["capture"] == capture
                 for s, e in p["intervals"])
    out: list[tuple[float, float]] = []
    for s, e in ivs:
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _pause_timeline(doc: dict[str, Any], plt: Any, path: Path) -> None:
    rows = pause_rows(doc)
    span = capture_span_s(doc)
    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.45 * max(1, len(rows))))
    storm_s = doc["options"]["storm_detection_s"]
    drawn: set[str] = set()

    def once(name: str) -> str:
        if name in drawn:
            return "_nolegend_"
        drawn.add(name)
        return name

    for i, r in enumerate(rows):
        ax.broken_barh([(s, e - s) for s, e in r.paused_s], (i - 0.3, 0.6),
                       color="tab:orange", label=once("paused"))
        if r.storms_s:
            ax.broken_barh([(s, e - s) for s, e in r.storms_s], (i - 0.42, 0.84),
                           facecolor="none", edgecolor="tab:red", hatch="///", linewidth=1.5,
                           label=once(f"PFC storm (paused >= {storm_s * 1e3:g} ms)"))
            ax.plot(r.detected_s, [i] * len(r.detected_s), "v", color="black",
                    label=once("storm detected (watchdog time)"))
        if r.xon_storms_s:
            ax.broken_barh([(s, e - s) for s, e in r.xon_storms_s], (i - 0.15, 0.3),
                           color="tab:purple", label=once("XON storm"))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r.label for r in rows], fontsize="small")
    ax.set_ylim(max(1, len(rows)) - 0.5, -0.5)  # the earliest at the top
    _set_span(ax, span)
    ax.set_xlabel("time since the first packet [s]")
    n_int = sum(len(r.paused_s) for r in rows)
    ax.set_title(f"Paused intervals per sender and priority ({len(rows)} senders, "
                 f"{n_int} intervals, {len(doc['storms'])} PFC storms), earliest first"
                 if rows else "Paused intervals per sender and priority: no PFC/PAUSE frames")
    if rows:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _flow_throughput(doc: dict[str, Any], plt: Any, path: Path) -> None:
    drawn, total = plotted_throughput(doc)
    span = capture_span_s(doc)
    dt = doc["options"]["interval_s"]
    captures = [c["name"] for c in doc["captures"] if any(cap == c["name"] for cap, _ in drawn)]
    fig, axes = plt.subplots(max(1, len(captures)), 1, sharex=True, squeeze=False,
                             figsize=(11, 1.2 + 2.2 * max(1, len(captures))))
    shown = (f"the {len(drawn)} of {total} flow directions with the most data"
             if total > len(drawn) else f"all {total} flow directions with data")
    fig.suptitle(f"Data throughput per {dt * 1e3:g} ms window ({shown}); empty windows are 0")
    slots: list[str | None] = [*captures] or [None]
    for ax, cap in zip(axes[:, 0], slots, strict=True):
        if cap is None:
            ax.text(0.5, 0.5, "no RoCE data", ha="center", va="center", transform=ax.transAxes)
            continue
        for c, series in drawn:
            if c == cap:
                _draw_steps(ax, series, linewidth=1.2)
        for k, (s, e) in enumerate(_paused_union(doc, cap)):
            ax.axvspan(s, e, color="tab:red", alpha=0.12,
                       label="paused (PFC/PAUSE on this link)" if k == 0 else "_nolegend_")
        ax.set_title(f"capture {cap}", fontsize="medium", loc="left")
        ax.set_ylabel("Gb/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    axes[-1, 0].set_xlabel("time since the first packet [s]")
    _set_span(axes[-1, 0], span)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def ecn_captures(doc: dict[str, Any], n: int = TOP_CAPTURES) -> list[str]:
    """The captures ``ce_cnp.png`` draws: those with CE marks or CNPs, the most first."""
    marks = {name: sum(s["ce_packets"]) + sum(s["cnps"])
             for name, s in doc["ecn_series"].items()}
    order = [c["name"] for c in doc["captures"] if marks.get(c["name"])]
    return sorted(order, key=lambda c: -marks[c])[:n]


def _ce_cnp(doc: dict[str, Any], plt: Any, path: Path) -> None:
    caps = ecn_captures(doc)
    span = capture_span_s(doc)
    dt = doc["options"]["interval_s"]
    fig, axes = plt.subplots(max(1, len(caps)), 1, sharex=True, squeeze=False,
                             figsize=(11, 1.2 + 2.0 * max(1, len(caps))))
    without = [c["name"] for c in doc["captures"]
               if c["name"] not in caps and c["readable"]]
    marked = sum(1 for s in doc["ecn_series"].values() if any(s["ce_packets"]) or any(s["cnps"]))
    title = f"CE-marked packets and CNPs per {dt * 1e3:g} ms window"
    if marked > len(caps):
        title += f" (the {len(caps)} of {marked} captures with the most)"
    fig.suptitle(title)
    slots: list[str | None] = [*caps] or [None]
    for ax, cap in zip(axes[:, 0], slots, strict=True):
        if cap is None:
            ax.text(0.5, 0.5, "no CE marks or CNPs in any capture", ha="center", va="center",
                    transform=ax.transAxes)
            continue
        ce, cnp = ecn_series(doc, cap)
        _draw_steps(ax, ce, color="tab:blue", linewidth=3, alpha=0.5)
        _draw_steps(ax, cnp, color="black", linestyle="--", linewidth=1)
        ax.set_title(f"capture {cap}", fontsize="medium", loc="left")
        ax.set_ylabel("per window")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    last = axes[-1, 0]
    last.set_xlabel("time since the first packet [s]"
                    + (f"; none in: {', '.join(without)}" if caps and without else ""))
    _set_span(last, span)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_plots(doc: dict[str, Any], outdir: str | Path) -> list[Path]:
    """``pause_timeline.png``, ``flow_throughput.png`` and ``ce_cnp.png`` in ``outdir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in (("pause_timeline.png", _pause_timeline),
                       ("flow_throughput.png", _flow_throughput), ("ce_cnp.png", _ce_cnp)):
        path = out / name
        draw(doc, plt, path)
        written.append(path)
    return written


__all__ = [
    "TOP_CAPTURES", "TOP_FLOWS", "DataStream", "PauseRow", "StepSeries", "capture_span_s",
    "data_streams", "ecn_captures", "ecn_series", "pause_rows", "plotted_throughput",
    "throughput_series", "window_steps", "write_plots",
]
