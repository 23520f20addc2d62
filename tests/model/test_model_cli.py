"""netio-model's command line: outputs, exit codes and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from netio.cli.model import (
    EXIT_BROKEN_PIPE,
    EXIT_INFEASIBLE,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_USAGE,
    main,
    parse_size,
)

INFEASIBLE = {
    "tensor_parallel": 1, "pipeline_parallel": 1, "interleave": 1, "data_parallel": 1,
    "expert_parallel": 1, "context_parallel": 1, "sequence_parallel": False, "zero_stage": 0,
    "micro_batch_size": 1, "global_batch_size": 8, "recompute": "none", "attention": "flash",
    "compute_dtype": "bf16", "grad_reduce_dtype": "fp32", "overlap_grad_reduce": False,
    "overlap_tp_comm": False,
}


def test_train_text_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["train", "dgx-a100-80gb", "gpt3-175b", "korthikanti-175b-seqsel"]
    assert main(args) == EXIT_OK
    text = capsys.readouterr().out
    assert "bottleneck:" in text and "memory per accelerator [GiB]" in text
    assert "TP 8 x PP 8 (3 chunks) x DP 1; sequence parallel" in text
    plot = tmp_path / "step.png"
    assert main([*args, "--json", "--plot", str(plot)]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["feasible"] is True and doc["step_s"] > 0
    assert set(doc["breakdown_s"]) >= {"compute", "tp_communication", "bubble"}
    assert doc["memory_per_accelerator_bytes"]["capacity"] == 80 * 2**30
    assert doc["execution"]["interleave"] == 3 and doc["execution"]["recompute"] == "selective"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_infeasible_layout_exits_1_with_the_reason(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    ex = tmp_path / "ex.json"
    ex.write_text(json.dumps(INFEASIBLE))
    assert main(["train", "dgx-h100", "llama3-70b", str(ex)]) == EXIT_INFEASIBLE
    assert "INFEASIBLE: memory: needs" in capsys.readouterr().out


def test_bad_input_is_one_line_naming_file_and_key(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    ex = tmp_path / "ex.json"
    ex.write_text(json.dumps({**INFEASIBLE, "pipeline_paralel": 2}))
    assert main(["train", "dgx-h100", "llama3-70b", str(ex)]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert err == f"netio-model: {ex}: pipeline_paralel: unknown key\n"
    assert main(["train", "no-such-system", "llama3-70b", str(ex)]) == EXIT_INPUT
    assert "no-such-system: no such file, and not a system preset" in capsys.readouterr().err


def test_collective_and_presets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collective", "dgx-h100", "--op", "all_gather", "--ranks", "16",
                 "--sizes", "1M,1G", "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["nodes"] == 2 and [r["size_bytes"] for r in doc["sizes"]] == [2**20, 2**30]
    assert main(["collective", "dgx-h100", "--op", "all_reduce", "--ranks", "12",
                 "--ranks-per-node", "8"]) == EXIT_USAGE
    assert main(["presets"]) == EXIT_OK
    assert "dgx-a100-80gb" in capsys.readouterr().out


def test_usage_errors_exit_2() -> None:
    with pytest.raises(SystemExit) as info:
        main(["collective", "dgx-h100", "--op", "all_reduce", "--ranks", "8", "--sizes", "1Q"])
    assert info.value.code == EXIT_USAGE
    assert parse_size("1MiB") == 2**20 and parse_size("64K") == 65536


def test_module_runs_as_a_program() -> None:
    out = subprocess.run([sys.executable, "-m", "netio.cli.model", "presets"],
                         capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.startswith("system: ")


def test_closed_pipe_exits_141_quietly() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "netio.cli.model", "collective", "dgx-h100",
                             "--op", "all_reduce", "--ranks", "64", "--json", "--sizes",
                             ",".join(["1M"] * 2000)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == EXIT_BROKEN_PIPE
    assert err == b""


def test_readme_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    """Every ``netio-model`` command in README's netio-model section runs and exits 0."""
    import shlex

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme[readme.index("## netio-model"):]
    commands = [line.split("#")[0].strip() for line in section.splitlines()
                if line.startswith("netio-model ")]
    assert len(commands) >= 3
    for command in commands:
        assert main(shlex.split(command)[1:]) == EXIT_OK, command
    assert "bottleneck:" in capsys.readouterr().out
    code = section[section.index("```python") + len("```python"):]
    exec(code[:code.index("```")], {})  # the library example
