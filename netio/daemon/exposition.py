"""Samples to the Prometheus text (0.0.4) or OpenMetrics (1.0.0) exposition.

The output is byte for byte what prometheus-client's ``generate_latest`` writes
for the same metric families (tests hold it to that): families sorted by name,
``# HELP`` and ``# TYPE`` lines, label pairs sorted by label name, values in Go's
float format.  It is written here rather than through prometheus-client because
that builds a family object, a sample tuple and a label dict per series per
scrape; a :class:`Renderer` instead keeps each series' ``name{labels} `` text
from one snapshot to the next (per read plan for :class:`PlannedSamples`), so
rendering is one value format per series.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from netio.telemetry.sample import MetricKind, MetricSpec, PlannedSamples, Sample, SeriesPlan

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

_INF = math.inf


def go_float(value: float) -> str:
    """A value as Prometheus writes it: Go's ``%g``-like float text (``1.0``,
    ``1.5e+06``, ``+Inf``, ``NaN``)."""
    d = float(value)
    if -_INF < d < 1e6:  # the common case: Python's repr is Go's text
        return repr(d)
    if d == _INF:
        return "+Inf"
    if d == -_INF:
        return "-Inf"
    if d != d:
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    # Go switches to an exponent from 1e21 down to 1e6 where Python does not.
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _escape_label_value(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _counter_base(name: str) -> str:
    return name[:-6] if name.endswith("_total") else name


def _head(spec: MetricSpec, openmetrics: bool) -> str:
    if spec.kind is MetricKind.COUNTER:
        base = _counter_base(spec.name)
        name, kind = (base, "counter") if openmetrics else (base + "_total", "counter")
    elif spec.kind is MetricKind.GAUGE:
        name, kind = spec.name, "gauge"
    else:
        name, kind = spec.name, "unknown" if openmetrics else "untyped"
    doc = spec.help.replace("\\", r"\\").replace("\n", r"\n")
    if openmetrics:
        doc = doc.replace('"', r"\"")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


def _prefix(spec: MetricSpec, labels: tuple[str, ...]) -> str:
    name = _counter_base(spec.name) + "_total" if spec.kind is MetricKind.COUNTER \
        else spec.name
    if not labels:
        return name + " "
    pairs = ",".join(f'{k}="{_escape_label_value(v)}"'
                     for k, v in sorted(zip(spec.labels, labels, strict=True)))
    return f"{name}{{{pairs}}} "


class Renderer:
    """Renders samples, remembering each series' line prefix and each family's
    header between calls (the series of a host change rarely)."""

    # Forget remembered prefixes when they outnumber this many times the series
    # rendered (devices come and go; the cache must not grow without bound).
    _SLACK = 2

    def __init__(self) -> None:
        self._prefixes: dict[tuple[str, tuple[str, ...]], str] = {}
        self._heads: dict[tuple[str, bool], str] = {}
        # per read plan (kept while it is rendered): each series' prefix
        self._plans: dict[SeriesPlan, tuple[str, ...]] = {}

    def render(self, samples: Iterable[Sample], *, openmetrics: bool = False,
               eof: bool = True) -> bytes:
        """Exposition bytes.  ``eof=False`` leaves off OpenMetrics' ``# EOF`` so that
        another rendered part can follow.  A repeated series keeps its first value."""
        return self.render_all((samples,), openmetrics=openmetrics, eof=eof)

    def render_all(self, groups: Iterable[Iterable[Sample]], *, openmetrics: bool = False,
                   eof: bool = True) -> bytes:
        """:meth:`render` of the groups one after the other; a
        :class:`PlannedSamples` group is read from its plans, without Sample objects."""
        # name -> (spec, labels -> value, labels -> prefix where a plan gave it); no
        # per-series containers, which would feed the garbage collector
        by_name: dict[str, tuple[MetricSpec, dict[tuple[str, ...], float],
                                 dict[tuple[str, ...], str]]] = {}
        plans = self._plans
        seen_plans: dict[SeriesPlan, tuple[str, ...]] = {}
        for group in groups:
            if isinstance(group, PlannedSamples):
                for plan, values in group.parts:
                    pre = seen_plans.get(plan) or plans.get(plan)
                    if pre is None:
                        pre = tuple(_prefix(spec, lv)
                                    for spec, lv in zip(plan.specs, plan.labels, strict=True))
                    seen_plans[plan] = pre
                    specs, plan_labels, scales = plan.specs, plan.labels, plan.scales
                    for name, positions in plan.by_name.items():
                        entry = by_name.get(name)
                        if entry is None:
                            entry = by_name[name] = (specs[positions[0]], {}, {})
                        _spec, series, known = entry
                        for i in positions:
                            v = values[i]
                            if v is None:
                                continue
                            lv = plan_labels[i]
                            if lv not in series:
                                series[lv] = v * scales[i]
                                known[lv] = pre[i]
                continue
            for s in group:
                entry = by_name.get(s.spec.name)
                if entry is None:
                    entry = by_name[s.spec.name] = (s.spec, {}, {})
                series = entry[1]
                if s.labels not in series:
                    series[s.labels] = s.value
        self._plans = seen_plans
        prefixes, heads = self._prefixes, self._heads
        out: list[str] = []
        n_series = 0
        for name in sorted(by_name):
            spec, series, known = by_name[name]
            head = heads.get((name, openmetrics))
            if head is None:
                head = heads[(name, openmetrics)] = _head(spec, openmetrics)
            out.append(head)
            n_series += len(series)
            for labels, value in series.items():
                prefix = known.get(labels)
                if prefix is None:
                    prefix = prefixes.get((name, labels))
                    if prefix is None:
                        prefix = prefixes[(name, labels)] = _prefix(spec, labels)
                out.append(prefix)
                out.append(go_float(value))
                out.append("\n")
        if openmetrics and eof:
            out.append("# EOF\n")
        if len(prefixes) > self._SLACK * n_series + 1024:
            self._prefixes = {}
        if len(heads) > self._SLACK * 2 * len(by_name) + 64:
            self._heads = {}
        return "".join(out).encode()


def render(samples: Iterable[Sample], *, openmetrics: bool = False, eof: bool = True) -> bytes:
    """One-off rendering (see :meth:`Renderer.render`)."""
    return Renderer().render(samples, openmetrics=openmetrics, eof=eof)
