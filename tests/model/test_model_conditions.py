"""Congestion what-ifs: the factors' closed forms, reading netio's own documents (a real
netio-analyze report of the demo scenario, a daemon profile, a fabric profile), and what
the conditions cost a training step."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
from pathlib import Path

import pytest
from model_helpers import profile_doc, write

from netio.errors import ModelInputError
from netio.model import load_execution, load_model, load_system
from netio.model.conditions import (
    DCQCN_TIMER_S,
    Conditions,
    factors,
    from_daemon_profile,
    load_conditions,
    train_what_if,
)
from netio.model.schema import execution_from_dict
from netio.telemetry.profile import (
    FabricProfile,
    InterfaceProfile,
    PriorityPause,
    RdmaPortProfile,
    to_json_dict,
)


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``netio scenario --preset demo DIR && netio-analyze --json DIR/*.pcap``, in process."""
    from netio.cli.analyze import main as analyze_main
    from netio.scenario.generate import generate
    from netio.scenario.presets import preset

    d = tmp_path_factory.mktemp("demo")
    generate(preset("demo"), d, truth=False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        analyze_main(["--json", *sorted(str(p) for p in d.glob("*.pcap"))])
    report = d / "report.json"
    report.write_text(out.getvalue())
    return report


def test_factors_closed_forms() -> None:
    system = load_system("dgx-h100")
    c = Conditions("what-if", pause_fraction=0.03, cnp_per_s=1000.0, loss_per_packet=1e-6,
                   rtt_s=10e-6, incast_fan_in=4, incast_fraction=0.1)
    f = factors(system, c)
    assert f["pfc_pause"] == pytest.approx(1 / 0.97)
    assert f["dcqcn_rate_reduction"] == pytest.approx(1 + 1000 * 55e-6)
    # 400 Gb/s x 10 us = 500 kB in flight resent per loss, 1e-6 losses per 4096 B packet.
    assert f["loss_go_back_n"] == pytest.approx(1 + 1e-6 * 500e3 / 4096)
    assert f["incast"] == pytest.approx(0.9 + 0.1 * 4)
    assert DCQCN_TIMER_S == 55e-6
    with pytest.raises(ModelInputError, match="pause_fraction"):
        Conditions("x", pause_fraction=1.0)


def test_demo_report_conditions(demo_report: Path) -> None:
    c = load_conditions(demo_report)
    # The demo story (netio/scenario/presets.py): host3 pauses sw1-p3 from 300 to 600 ms of
    # a 0.9 s capture, a third of the time; 4 senders converge on host3 (incast); flow D
    # loses a packet (go-back-N); host3 sends CNPs.
    assert c.pause_fraction == pytest.approx(0.3 / 0.9, rel=0.01)
    assert c.incast_fan_in == 4
    assert c.loss_per_packet > 0 and c.resend_ratio > 0
    assert c.cnp_per_s > 0
    assert c.rtt_s is not None and c.rtt_s > 0


def test_train_conditions_cli_on_demo_report(demo_report: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from netio.cli.model import EXIT_OK, main

    assert main(["train", "dgx-h100", "llama3-70b", "llama3-70b-64gpu", "--conditions",
                 str(demo_report), "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    w = doc["what_if"]
    assert w["with_conditions_s"] > w["baseline_s"] == doc["step_s"]
    names = {t["condition"] for t in w["terms"]}
    assert names == {"pfc_pause", "dcqcn_rate_reduction", "loss_go_back_n", "incast"}
    pause = next(t for t in w["terms"] if t["condition"] == "pfc_pause")
    assert pause["explanation"].startswith("33.3% PFC pause on the inter-node links adds ")
    assert "ms" in pause["explanation"]


def test_daemon_and_fabric_profiles(tmp_path: Path) -> None:
    prof = FabricProfile(1, "h", 0.0, (
        InterfaceProfile("eth0", True, 100e9, 1e9, 1e9, 0.01, "duration",
                         (PriorityPause(3, 0.05, 0.0, 10.0, 0.0, True, False),
                          PriorityPause(4, None, None, None, None, None, False))),),
        (RdmaPortProfile("mlx5_0", "1", 100e9, 1e9, 1e9, 1e5, 2e5, 10.0, 250.0, 5.0, 20.0,
                         0.0, 0.0),), (), ())
    c = from_daemon_profile(json.loads(json.dumps(to_json_dict(prof))))  # as served
    assert c.pause_fraction == 0.05
    assert c.cnp_per_s == 250.0
    assert c.resend_ratio == pytest.approx(20.0 / 2e5)
    fab = load_conditions(write(tmp_path / "p.json", profile_doc()))
    assert (fab.pause_fraction, fab.cnp_per_s, fab.resend_ratio) == (0.03, 120.0, 0.001)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ModelInputError, match="not a netio-analyze"):
        load_conditions(bad)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"pause_senders": [{"paused_fraction": "x"}], "flows": []}))
    with pytest.raises(ModelInputError, match=r"pause_senders\[0\]\.paused_fraction"):
        load_conditions(broken)


def test_what_if_costs_only_what_crosses_the_network() -> None:
    system, model = load_system("dgx-h100"), load_model("llama3-70b")
    multi = load_execution("llama3-70b-64gpu")
    c = Conditions("what-if", pause_fraction=0.10)
    w = train_what_if(system, model, multi, c)
    assert w.with_conditions_s > w.baseline_s
    # More pause never makes a step faster.
    w2 = train_what_if(system, model, multi, Conditions("what-if", pause_fraction=0.30))
    assert w2.with_conditions_s >= w.with_conditions_s
    # A job inside one node (TP 8, no data parallelism) does not cross the network.
    one_node = execution_from_dict({
        "tensor_parallel": 8, "pipeline_parallel": 1, "interleave": 1, "data_parallel": 1,
        "expert_parallel": 1, "context_parallel": 1, "sequence_parallel": True,
        "zero_stage": 1, "micro_batch_size": 1, "global_batch_size": 8,
        "recompute": "full", "attention": "flash", "compute_dtype": "bf16",
        "grad_reduce_dtype": "fp32", "overlap_grad_reduce": True, "overlap_tp_comm": False})
    w3 = train_what_if(system, model, one_node, c)
    assert w3.with_conditions_s == w3.baseline_s
    assert "no exposed communication grows" in w3.terms[0].sentence


def test_readme_story_calibrate_sweep_conditions(demo_report: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """README's end-to-end story from ``calibrate`` on (a written fabric profile stands in
    for ``netio bench --profile``): every ``$ netio-model`` line runs and exits 0."""
    from netio.cli.model import EXIT_OK, main

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    story = readme[readme.index("**End to end"):]
    story = story[:story.index("```\n\n")]
    lines = [ln.split("#")[0].strip()[2:] for ln in story.splitlines()
             if ln.startswith("$ netio-model ")]
    assert [ln.split()[1] for ln in lines] == ["calibrate", "sweep", "train"]
    write(tmp_path / "link.json", profile_doc())
    (tmp_path / "report.json").write_text(demo_report.read_text())
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for line in lines:
            assert main(shlex.split(line)[1:]) == EXIT_OK, line
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "PFC pause on the inter-node links adds" in out
    assert (tmp_path / "my-cluster.json").is_file()
    assert (tmp_path / "my-sweep-frontier.png").is_file()


def test_infer_what_if_tp_across_nodes_and_kv_transfer() -> None:
    from netio.model.conditions import infer_what_if
    from netio.model.inference import Request, Serving

    system, model = load_system("dgx-h100"), load_model("llama3-70b")
    req = Request(4096, 256)
    c = Conditions("what-if", pause_fraction=0.2)
    inside = infer_what_if(system, model, req, Serving(), c, tp=8, concurrency=64)
    assert inside.with_conditions_s == inside.baseline_s  # NVLink only
    # Across two nodes the ring's 8 NICs per node (400 GB/s) and NVLink (450 GB/s at
    # ~0.75 efficiency) are close: a 20 % pause still hides behind NVLink, half does not.
    across = infer_what_if(system, model, req, Serving(),
                           Conditions("what-if", pause_fraction=0.5), tp=16, concurrency=64)
    assert across.with_conditions_s > across.baseline_s
    assert "exposed tp_comm" in across.terms[0].sentence
    dis = infer_what_if(system, model, req, Serving(), c, tp=8, concurrency=64,
                        disaggregate=True)
    # The prompt's KV transfer crosses the network even when decoding stays in the node:
    # at 20 % pause its bandwidth part takes 1 / 0.8 as long.
    assert "KV transfer per prompt" in dis.terms[0].sentence
