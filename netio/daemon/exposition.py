"""Samples to the Prometheus text (0.0.4) or OpenMetrics exposition, via prometheus-client."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector

from netio.telemetry.sample import MetricKind, MetricSpec, Sample

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def families(samples: Iterable[Sample]) -> list[Metric]:
    """Group samples into metric families; a repeated series keeps its first value."""
    by_spec: dict[str, tuple[MetricSpec, dict[tuple[str, ...], float]]] = {}
    for s in samples:
        entry = by_spec.get(s.spec.name)
        if entry is None:
            entry = by_spec[s.spec.name] = (s.spec, {})
        entry[1].setdefault(s.labels, s.value)
    out: list[Metric] = []
    for name in sorted(by_spec):
        spec, series = by_spec[name]
        fam: Metric
        labels = list(spec.labels)
        if spec.kind is MetricKind.COUNTER:
            fam = CounterMetricFamily(name, spec.help, labels=labels)
        elif spec.kind is MetricKind.GAUGE:
            fam = GaugeMetricFamily(name, spec.help, labels=labels)
        else:
            fam = UnknownMetricFamily(name, spec.help, labels=labels)
        for lv, v in series.items():
            fam.add_metric(list(lv), v)
        out.append(fam)
    return out


class _Once(Collector):
    def __init__(self, fams: list[Metric]) -> None:
        self._fams = fams

    def collect(self) -> Iterator[Metric]:
        return iter(self._fams)


def render(samples: Iterable[Sample], *, openmetrics: bool = False,
           eof: bool = True) -> bytes:
    """Exposition bytes.  ``eof=False`` leaves off OpenMetrics' ``# EOF`` so that
    another rendered part can follow."""
    reg = _Once(families(samples))
    if not openmetrics:
        return generate_latest(reg)
    body: bytes = generate_openmetrics(reg)  # type: ignore[no-untyped-call]
    if not eof and body.endswith(b"# EOF\n"):
        body = body[:-6]
    return body
