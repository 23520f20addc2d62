"""The flow documents made a chunk at a time (netio.analyze.flowdocs).

The JSON text written for each flow must be what ``json.dumps`` makes of its
dict (the encoding changed from "encode each dict" to "format the columns"),
the bulk latency summaries must equal ``LatencySketch.summary_s`` (the
reference quantile rule in netio.analyze.sketch), and the flows handed to the
findings must include every flow that has a finding.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_analyze_scenario import _pause_scenario

from netio import native
from netio.analyze import flowdocs
from netio.analyze.columns import key_of_words
from netio.analyze.engine import analyze
from netio.analyze.findings import _flow_problems, flow_name
from netio.analyze.flowdocs import FlowDocuments, sketch_summaries
from netio.analyze.flows import FlowKeys, SketchTable
from netio.analyze.options import AnalysisOptions
from netio.analyze.sketch import MAX_BINS, SketchBuilder
from netio.scenario import generate, scenario_from_dict
from netio.scenario.presets import demo_dict, small_dict


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> list[list[str]]:
    """Scenarios with READs, losses, NAKs, CE marks and CNPs, PFC storms."""
    out = []
    for i, sc in enumerate((small_dict(), demo_dict(0.2), _pause_scenario())):
        g = generate(scenario_from_dict(sc), tmp_path_factory.mktemp(f"sc{i}"))
        out.append([str(p) for p in g.captures])
    return out


@pytest.mark.parametrize("use_native", [False, True])
@pytest.mark.parametrize("chunk", [1, 3, 2048])
def test_json_text_is_json_dumps_of_each_document(captures: list[list[str]], use_native: bool,
                                                  chunk: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    if use_native and not native.AVAILABLE:
        pytest.skip("netio._native not built")
    monkeypatch.setattr(flowdocs, "CHUNK_FLOWS", chunk)  # chunk edges change nothing
    seen: set[str] = set()
    for paths in captures:
        doc = analyze(paths, AnalysisOptions(), use_native=use_native, stream_flows=True)
        flows = doc["flows"]
        assert isinstance(flows, FlowDocuments)
        docs, texts = list(flows), list(flows.json_lines())
        assert len(docs) == len(texts) == len(flows) > 0
        for d, t in zip(docs, texts, strict=True):
            assert t == json.dumps(d)
            seen.update(k for k, v in d.items() if v not in (None, 0, {}, []))
            seen.update(f"reverse.{k}" for k, v in (d["reverse"] or {}).items() if v)
    # The captures exercise the optional parts of a document.
    assert {"read_responses", "naks", "ack_latency_s", "read_latency_s", "rnr_naks",
            "psn_gap_packets", "reverse.opcodes"} <= seen


def test_findings_see_every_flow_with_a_problem(captures: list[list[str]]) -> None:
    for paths in captures:
        doc = analyze(paths, AnalysisOptions(), stream_flows=True)
        flows = doc["flows"]
        gap = doc["options"]["cnp_min_gap_s"]
        with_problems = {(f["capture"], flow_name(f)) for f in flows.with_problems()}
        having = {(f["capture"], flow_name(f)) for f in flows if _flow_problems(f, gap)}
        assert having <= with_problems
        assert having  # the scenarios have losses


def _sketch(values: list[int]) -> Any:
    b = SketchBuilder()
    for v in values:
        b.add(v)
    return b.finish()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.one_of(st.integers(0, 20), st.integers(0, 10**12)),
                         max_size=40), min_size=1, max_size=6))
def test_bulk_summaries_equal_the_reference(per_flow: list[list[int]]) -> None:
    sketches = {(fid, "ack"): _sketch(v) for fid, v in enumerate(per_flow) if v}
    table = SketchTable.of(sketches)
    fids = np.array([*range(len(per_flow)), -1], np.int64)
    got = sketch_summaries(table, fids, "ack")
    want = [sketches[(f, "ack")].summary_s() if (f, "ack") in sketches else None
            for f in range(len(per_flow))] + [None]
    assert got == want
    assert sketch_summaries(table, fids, "cnp") == [None] * len(fids)


def test_bulk_summaries_of_a_folded_sketch() -> None:
    # Values over more than MAX_BINS buckets: the lowest ones fold (sketch docstring).
    values = [1, 2, 3] + [int(1.07 ** k) for k in range(600)]
    sk = _sketch(values)
    assert len(sk.bins) == MAX_BINS
    table = SketchTable.of({(0, "read"): sk})
    assert sketch_summaries(table, np.array([0], np.int64), "read") == [sk.summary_s()]


def test_key_columns_match_the_keys() -> None:
    words = np.array([[7, 0x0A000001, 0, 0x0A000002, 0],
                      [(1 << 32) | 0xFFFFFF, 0xFE80 << 48, 5, 1 << 63, 9]], np.uint64)
    keys = FlowKeys(words)
    src, dst, qp, v6 = keys.columns(np.array([1, 0]))
    want = [key_of_words(*w) for w in words[[1, 0]].tolist()]
    assert list(zip(src, dst, qp, v6, strict=True)) == [tuple(k) for k in want]
    assert list(keys) == [key_of_words(*w) for w in words.tolist()]


def test_write_json_streams_the_text(captures: list[list[str]], tmp_path: Path) -> None:
    from netio.analyze.report import to_json

    streamed = analyze(captures[0], AnalysisOptions(), stream_flows=True)
    listed = analyze(captures[0], AnalysisOptions())
    assert to_json(streamed) == to_json(listed)
    assert json.loads(to_json(streamed))["flows"] == listed["flows"]


def test_mac_text() -> None:
    from netio.analyze.units import format_mac_int

    # The colon-hex text of the 48-bit address (IEEE 802 canonical form), written out.
    assert format_mac_int(0x0123456789AB) == "01:23:45:67:89:ab"
    assert format_mac_int(0) == "00:00:00:00:00:00"
    assert format_mac_int((1 << 48) | 0x020000000001) == "02:00:00:00:00:01"


def test_text_report_makes_only_the_top_flows(captures: list[list[str]],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from netio.analyze.report import to_text

    paths = [p for ps in captures[:2] for p in ps]
    streamed = analyze(paths, AnalysisOptions(), stream_flows=True)
    listed = analyze(paths, AnalysisOptions())
    made = 0
    real = flowdocs._docs

    def counting(capture: str, ch: Any) -> Any:
        nonlocal made
        for d in real(capture, ch):
            made += 1
            yield d

    monkeypatch.setattr(flowdocs, "_docs", counting)
    n_caps = len({f["capture"] for f in listed["flows"]})
    assert len(listed["flows"]) > 2 * n_caps
    for top in (1, 2, 1000):
        want = to_text(listed, top=top)
        made = 0
        assert to_text(streamed, top=top) == want
        assert made <= top * n_caps  # the findings were made by analyze()
