"""The analyzer recovers the scenario generator's ground truth exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from analyze_helpers import compare_with_truth

from netio import native
from netio.analyze.engine import analyze
from netio.analyze.options import AnalysisOptions
from netio.errors import ScenarioError
from netio.scenario import generate, load_scenario, pause_intervals, scenario_from_dict
from netio.scenario.presets import bench_dict, small_dict


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, Any]]:
    out = tmp_path_factory.mktemp("small")
    g = generate(scenario_from_dict(small_dict()), out)
    assert g.truth_path is not None
    return [str(p) for p in g.captures], json.loads(g.truth_path.read_text())


@pytest.mark.parametrize("use_native", [True, False])
def test_small_preset_matches_truth(small: tuple[list[str], dict[str, Any]],
                                    use_native: bool) -> None:
    if use_native and not native.AVAILABLE:
        pytest.fail("netio._native is not built")
    paths, truth = small
    doc = analyze(paths, AnalysisOptions(), use_native=use_native)
    assert compare_with_truth(doc, truth) == []
    # The story's key facts, stated plainly.
    assert [s["capture"] for s in doc["storms"]] == ["host3", "sw1-p1", "sw1-p4"]
    chain = doc["spreading"][0]
    assert chain["root"]["capture"] == "host3"
    assert chain["congested_destination"] == "10.0.0.3"
    assert [v["capture"] for v in chain["victims"]] == ["sw1-p4"]
    assert doc["incast"] and doc["incast"][0]["destination"] == "10.0.0.3"


@pytest.mark.parametrize("chunk", [1, 97, 5000])
def test_chunking_does_not_change_the_result(small: tuple[list[str], dict[str, Any]],
                                             chunk: int) -> None:
    paths, _ = small
    whole = analyze(paths, AnalysisOptions())
    chunked = analyze(paths, AnalysisOptions(), chunk_records=chunk)
    assert json.dumps(chunked, sort_keys=True) == json.dumps(whole, sort_keys=True)


def _pause_scenario() -> dict[str, Any]:
    hop = [{"port": "p", "src_mac": "02:00:00:00:00:01", "dst_mac": "02:00:00:00:00:02"}]
    return {
        "name": "pauses",
        "ports": [{"name": "p", "link_speed": "25G"}],
        "flows": [
            {"name": "r", "src_ip": "10.1.0.1", "dst_ip": "10.1.0.2", "src_qp": 0x10,
             "dst_qp": 0x20, "op": "read", "message_bytes": 10000, "pmtu": 1024,
             "messages": 300, "rate": "2G", "ce": [{"from": 0.001, "to": 0.01, "every": 3}],
             "hops": hop},
            {"name": "w", "src_ip": "10.1.0.1", "dst_ip": "10.1.0.2", "src_qp": 0x11,
             "dst_qp": 0x21, "op": "write", "message_bytes": 3000, "pmtu": 1024,
             "messages": 2000, "rate": "1G", "start_psn": 0xFFFFF0, "drops": [5, 900],
             "rnr": [300], "bad_icrc": [7], "hops": hop},
        ],
        "pauses": [
            # Refreshed slower than the pause lasts: separate intervals, no XON.
            {"port": "p", "src_mac": "02:00:00:00:00:02", "start": 0.002, "duration": 0.001,
             "quanta": 1000, "refresh": 40e-6, "xon": False, "priorities": [3, 5]},
            {"port": "p", "src_mac": "02:00:00:00:00:02", "kind": "pause", "start": 0.02,
             "duration": 0.003, "quanta": 0xFFFF, "refresh": 1e-3},
        ],
        "xon_storms": [{"port": "p", "src_mac": "02:00:00:00:00:09", "priority": 4,
                        "start": 0.001, "duration": 0.03, "interval": 1e-4}],
    }


def test_pause_xon_storm_pause8023_read_and_losses(tmp_path: Path) -> None:
    opts = AnalysisOptions(link_bps_by_capture={"p": 25_000_000_000},
                           xon_storm_ns=20_000_000)
    g = generate(scenario_from_dict(_pause_scenario()), tmp_path, opts=opts)
    assert g.truth_path is not None
    truth = json.loads(g.truth_path.read_text())
    doc = analyze([str(p) for p in g.captures], opts)
    assert compare_with_truth(doc, truth) == []
    sender = {(s["kind"], s["priority"]): s for s in doc["pause_senders"]}
    assert len(sender[("pfc", 3)]["intervals"]) > 1  # refresh gaps split the pause
    assert sender[("pause", None)]["paused_s"] > 0
    assert len(doc["xon_storms"]) == 1
    flows = {f["dest_qp"]: f for f in doc["flows"]}
    w = flows[0x21]
    assert w["psn_gap_packets"] == 2 and w["rnr_naks"] == 1 and w["icrc_failures"] == 1
    assert flows[0x20]["read_latency_s"]["count"] == 300
    assert flows[0x20]["reverse"]["ecn"]["ce_packets"] > 0
    # At the default 100G the same quanta mean a quarter of the time.
    doc100 = analyze([str(p) for p in g.captures], AnalysisOptions(xon_storm_ns=20_000_000))
    s100 = {(s["kind"], s["priority"]): s for s in doc100["pause_senders"]}
    assert s100[("pfc", 5)]["paused_s"] == pytest.approx(sender[("pfc", 5)]["paused_s"] / 4)


def test_pause_interval_rule() -> None:
    link = 512 * 1_000_000_000  # 1 quantum = 1 ns
    # Refresh restarts the timer (may shorten it); XON ends; a late frame starts anew.
    frames = [(0, 100), (50, 10), (55, 100), (100, 0), (300, 20), (400, 5)]
    assert pause_intervals(frames, link) == [(0, 100), (300, 320), (400, 405)]
    assert pause_intervals([(0, 0), (10, 0)], link) == []


def test_scenario_validation(tmp_path: Path) -> None:
    bad = small_dict()
    bad["flows"][0]["bogus"] = 1
    with pytest.raises(ScenarioError, match="bogus"):
        scenario_from_dict(bad)
    bad = small_dict()
    bad["flows"][0]["hops"][0]["port"] = "nowhere"
    with pytest.raises(ScenarioError, match="nowhere"):
        scenario_from_dict(bad)
    path = tmp_path / "s.json"
    path.write_text("{not json")
    with pytest.raises(ScenarioError, match=r"s\.json"):
        load_scenario(path)
    toml = tmp_path / "s.toml"
    toml.write_text('name = "t"\n[[ports]]\nname = "p"\n[[flows]]\nname = "f"\n'
                    'src_ip = "10.0.0.1"\ndst_ip = "10.0.0.2"\nsrc_qp = 2\ndst_qp = 3\n'
                    'op = "send"\nmessage_bytes = 100\nmessages = 3\n'
                    'hops = [{port = "p", src_mac = "02:00:00:00:00:01", '
                    'dst_mac = "02:00:00:00:00:02"}]\n')
    sc = load_scenario(toml)
    assert sc.flows[0].messages == 3


def test_bench_preset_is_valid_and_sized() -> None:
    from netio.scenario.generate import build

    tables, truth = build(scenario_from_dict(bench_dict(20_000)))
    n = sum(len(t) for t in tables.values())
    assert 15_000 < n < 25_000
    assert truth["storms"]


@pytest.mark.parametrize("name", ["demo", "bench"])
def test_every_preset_matches_truth(tmp_path: Path, name: str) -> None:
    from netio.scenario.presets import preset

    sc = preset(name) if name == "demo" else scenario_from_dict(bench_dict(40_000))
    g = generate(sc, tmp_path)
    assert g.truth_path is not None
    truth = json.loads(g.truth_path.read_text())
    doc = analyze([str(p) for p in g.captures], AnalysisOptions())
    assert compare_with_truth(doc, truth) == []
    assert truth["storms"] and truth["fairness"] and truth["flows"]


def test_small_truth_checks_fairness_and_incast(
        small: tuple[list[str], dict[str, Any]]) -> None:
    _, truth = small
    # The scenario's intent: A and C converge on host3 (10.0.0.3) together.
    keys = {(f["capture"], f["group"], f["key"]) for f in truth["fairness"]}
    assert ("host3", "destination", "10.0.0.3") in keys
    assert any(i["destination"] == "10.0.0.3" for i in truth["incast"])
    # ECN marks by kind and the throughput series are stated for every flow, both ways.
    assert all({"ect_packets", "becn_packets", "fecn_packets", "ce_packets"} <= f["ecn"].keys()
               and f["throughput"]["interval_s"] > 0 for f in truth["flows"])
    assert sum(f["reverse"]["ecn"]["becn_packets"] for f in truth["flows"]) > 0
    assert sum(len(f["throughput"]["bps"]) for f in truth["flows"]) > 0
    # The root's converging flows all go into host3, A and C among them, with data.
    conv = [f for f in truth["spreading"][0]["converging_flows"] if f["data_bytes"]]
    assert {f["dst_ip"] for f in conv} == {"10.0.0.3"}
    assert {("10.0.0.1", "10.0.0.3"), ("10.0.0.2", "10.0.0.3")} <= {
        (f["src_ip"], f["dst_ip"]) for f in conv}


def test_compare_is_two_sided(small: tuple[list[str], dict[str, Any]]) -> None:
    import copy

    paths, truth = small
    doc = analyze(paths, AnalysisOptions())
    assert compare_with_truth(doc, truth) == []
    spurious_flow = copy.deepcopy(doc)
    spurious_flow["flows"].append({**doc["flows"][0], "dest_qp": 0xBEEF})
    assert any("reported, not in the truth" in m
               for m in compare_with_truth(spurious_flow, truth))
    for key in ("storms", "pause_senders", "spreading", "incast", "fairness"):
        extra = copy.deepcopy(doc)
        extra[key].append(copy.deepcopy(doc[key][0]))
        assert compare_with_truth(extra, truth), key
        missing = copy.deepcopy(doc)
        missing[key].pop()
        assert compare_with_truth(missing, truth), key
    for path, change in ((("ecn", "ect_packets"), 1), (("reverse", "ecn", "becn_packets"), 1)):
        wrong = copy.deepcopy(doc)
        target = wrong["flows"][0]
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] += change
        assert compare_with_truth(wrong, truth), path
    quiet = copy.deepcopy(doc)
    quiet["findings"] = [f for f in doc["findings"] if f["kind"] != "rnr"]
    assert "rnr" in truth["finding_kinds"] and compare_with_truth(quiet, truth)
    fewer = copy.deepcopy(doc)
    fewer["spreading"][0]["converging_flows"].pop()
    assert compare_with_truth(fewer, truth)
    slow = copy.deepcopy(doc)
    busy = next(f for f in slow["flows"] if f["throughput"]["bps"])
    busy["throughput"]["bps"][0] *= 1.01
    assert compare_with_truth(slow, truth)
    no_incast_truth = {k: v for k, v in truth.items() if k != "incast"}
    assert compare_with_truth(doc, no_incast_truth) == [
        f"incast: {len(doc['incast'])} reported, the truth has none"]


def _icrc_scenario(snaplen: int) -> dict[str, Any]:
    hop = [{"port": "p", "src_mac": "02:00:00:00:00:01", "dst_mac": "02:00:00:00:00:02"}]
    return {"name": "icrc", "ports": [{"name": "p", "snaplen": snaplen}],
            "flows": [{"name": "w", "src_ip": "10.1.0.1", "dst_ip": "10.1.0.2",
                       "src_qp": 0x10, "dst_qp": 0x20, "op": "send", "message_bytes": 256,
                       "pmtu": 1024, "messages": 50, "rate": "1G", "bad_icrc": [3, 7],
                       "hops": hop}]}


@pytest.mark.parametrize(("snaplen", "want"), [(128, 0), (317, 0), (318, 2), (1500, 2)])
def test_icrc_failures_counted_per_packet_by_snaplen(tmp_path: Path, snaplen: int,
                                                     want: int) -> None:
    # A SEND ONLY of 256 bytes is 14 + 4 (VLAN) + 20 + 8 + 12 + 256 + 4 = 318 bytes on
    # the wire: checked (and found bad) only when the snap length keeps all 318.
    g = generate(scenario_from_dict(_icrc_scenario(snaplen)), tmp_path)
    assert g.truth_path is not None
    truth = json.loads(g.truth_path.read_text())
    doc = analyze([str(p) for p in g.captures], AnalysisOptions())
    assert compare_with_truth(doc, truth) == []
    assert doc["flows"][0]["icrc_failures"] == want


def test_cnp_rate_violations_follow_the_options(tmp_path: Path) -> None:
    d = _pause_scenario()
    d["flows"][0]["cnp_interval"] = 20e-6  # the READ flow's CNPs may come 20 µs apart
    sc = scenario_from_dict(d)
    for gap_ns in (50_000, 5_000):
        opts = AnalysisOptions(link_bps_by_capture={"p": 25_000_000_000},
                               xon_storm_ns=20_000_000, cnp_min_gap_ns=gap_ns)
        g = generate(sc, tmp_path / str(gap_ns), opts=opts)
        assert g.truth_path is not None
        truth = json.loads(g.truth_path.read_text())
        doc = analyze([str(p) for p in g.captures], opts)
        assert compare_with_truth(doc, truth) == []
        flows = {f["dest_qp"]: f for f in doc["flows"]}
        v = flows[0x20]["reverse"]["ecn"]["cnp_rate_violations"]
        assert (v > 0) if gap_ns == 50_000 else (v == 0), (gap_ns, v)


def test_scenario_pipeline_imports_one_way() -> None:
    """spec → packets → (captures, truth) → generate: no stage imports a later one."""
    import ast

    import netio.scenario

    stages = {"spec": 0, "presets": 1, "packets": 1, "captures": 2, "truth": 2, "generate": 3}
    root = Path(netio.scenario.__file__).parent
    for name, rank in stages.items():
        tree = ast.parse((root / f"{name}.py").read_text())
        imported = {n.module.rsplit(".", 1)[-1] for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and n.module
                    and n.module.startswith("netio.scenario.")}
        assert all(stages[m] < rank for m in imported), (name, imported)
        analyze_imports = {n.module for n in ast.walk(tree)
                           if isinstance(n, ast.ImportFrom) and n.module
                           and n.module.startswith("netio.analyze.")}
        # the generator uses the analyzer's vocabulary, never its analyses
        assert analyze_imports <= {"netio.analyze.columns", "netio.analyze.options",
                                   "netio.analyze.units"}, (name, analyze_imports)
