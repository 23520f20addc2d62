"""The exposition renderer writes exactly what prometheus-client writes for the same
families (text 0.0.4 and OpenMetrics), and remembers only what it still renders."""

from __future__ import annotations

import math
from pathlib import Path

from daemon_helpers import Mlx5Host
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.utils import floatToGoString

from netio.daemon.exposition import Renderer, go_float, render
from netio.telemetry import metrics as m
from netio.telemetry.ethtool import EthtoolCollector, EthtoolTextSource
from netio.telemetry.rdma import RdmaSysfsCollector
from netio.telemetry.sample import MetricKind, MetricSpec, PlannedSamples, Sample, SeriesPlan


def reference(samples: list[Sample], openmetrics: bool) -> bytes:
    """prometheus-client's rendering of the same samples (first value of a series wins)."""
    by_name: dict[str, tuple[MetricSpec, dict[tuple[str, ...], float]]] = {}
    for s in samples:
        by_name.setdefault(s.spec.name, (s.spec, {}))[1].setdefault(s.labels, s.value)
    fams: list[Metric] = []
    for name in sorted(by_name):
        spec, series = by_name[name]
        cls = {MetricKind.COUNTER: CounterMetricFamily,
               MetricKind.GAUGE: GaugeMetricFamily}.get(spec.kind, UnknownMetricFamily)
        fam = cls(name, spec.help, labels=list(spec.labels))
        for lv, v in series.items():
            fam.add_metric(list(lv), v)
        fams.append(fam)

    class Once:
        def collect(self):  # type: ignore[no-untyped-def]
            return iter(fams)

    if openmetrics:
        return generate_openmetrics(Once())  # type: ignore[no-any-return]
    return generate_latest(Once())  # type: ignore[arg-type]


def test_fixture_host_renders_as_prometheus_client_does(tmp_path: Path) -> None:
    h = Mlx5Host(tmp_path / "h", devices=2)
    h.hw["mlx5_0"].update(np_cnp_sent=7, out_of_sequence=2**40, rp_cnp_handled=123456789)
    h.write()
    samples = [*RdmaSysfsCollector(str(h.sys), passthrough_unknown=True).collect().samples,
               *EthtoolCollector(EthtoolTextSource(str(h.ethtool_dir)),
                                 passthrough_unknown=True).collect().samples,
               Sample(m.BUILD_INFO, ("0.1.0",), 1.0), Sample(m.SCRAPE_DURATION, (), 0.00123)]
    r = Renderer()
    for om in (False, True):
        for _again in range(2):  # the second time from remembered prefixes
            assert r.render(samples, openmetrics=om) == reference(samples, om)
    body = r.render(samples, openmetrics=True, eof=False)
    assert not body.endswith(b"# EOF\n") and body + b"# EOF\n" == reference(samples, True)


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_SPECS = (
    MetricSpec("netio_t_bytes_total", MetricKind.COUNTER, 'Bytes "moved"\\ or\nnot.',
               ("zone", "device", "b")),
    MetricSpec("netio_t_ratio", MetricKind.GAUGE, "A ratio.", ("x",)),
    MetricSpec("netio_t_stat", MetricKind.UNTYPED, "Passthrough.", ("device", "stat")),
    MetricSpec("netio_t_up", MetricKind.GAUGE, "No labels.", ()),
)
_VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                    st.integers(min_value=0, max_value=2**64 - 1).map(float))


@st.composite
def _samples(draw: st.DrawFn) -> list[Sample]:
    out = []
    for _ in range(draw(st.integers(0, 12))):
        spec = draw(st.sampled_from(_SPECS))
        labels = tuple(draw(st.lists(_TEXT, min_size=len(spec.labels),
                                     max_size=len(spec.labels))))
        out.append(Sample(spec, labels, draw(_VALUES)))
    return out


@settings(max_examples=150, deadline=None)
@given(_samples(), st.booleans())
def test_any_samples_render_as_prometheus_client_does(samples: list[Sample], om: bool) -> None:
    assert render(samples, openmetrics=om) == reference(samples, om)


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_go_float_is_prometheus_clients(v: float) -> None:
    assert go_float(v) == floatToGoString(v)


def test_go_float_examples() -> None:
    assert [go_float(v) for v in (0.0, 1.0, 1e6, 123456789.0, 1e21, -2.5e7, math.inf,
                                  -math.inf, math.nan, 2**64)] == [
        "0.0", "1.0", "1e+06", "1.23456789e+08", "1e+21", "-25000000.0", "+Inf", "-Inf",
        "NaN", "1.8446744073709552e+19"]


def test_remembered_series_are_bounded() -> None:
    r = Renderer()
    spec = _SPECS[1]
    for gen in range(5):  # devices come and go: 2000 new series each time
        r.render([Sample(spec, (f"d{gen}-{i}",), 1.0) for i in range(2000)])
    assert len(r._prefixes) <= 2 * 2000 + 1024


def test_planned_samples_render_as_their_samples_do() -> None:
    specs = (m.RDMA_BYTES, m.RDMA_BYTES, m.RDMA_CNP, m.RDMA_BYTES)
    labels = (("d", "1", "tx"), ("d", "1", "rx"), ("d", "1", "sent"), ("d", "1", "tx"))
    plan = SeriesPlan(specs, labels, (4.0, 4.0, 1.0, 1.0), (64,) * 4)
    other = SeriesPlan((m.RDMA_CNP,), (("e", "2", "sent"),), (1.0,), (64,))
    # a key twice in one plan, the same plan twice, an absent value, a tuple group after
    ps = PlannedSamples([(plan, [None, 2, 3, 9]), (other, [5]), (plan, [1, 7, 8, 6])])
    extra = (Sample(m.RDMA_CNP, ("e", "2", "sent"), 99.0), Sample(m.BUILD_INFO, ("x",), 1.0))
    r = Renderer()
    for om in (False, True):
        for _again in range(2):
            assert r.render_all([ps, extra], openmetrics=om) == reference(
                [*ps, *extra], om)
