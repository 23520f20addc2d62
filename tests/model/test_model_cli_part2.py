"""netio-model infer, sweep, calibrate, wafer and train --conditions: outputs, exit codes."""

from __future__ import annotations

import json

import pytest

from netio.cli.model import EXIT_INFEASIBLE, EXIT_INPUT, EXIT_OK, EXIT_USAGE, main


def test_infer_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["infer", "dgx-h100", "llama3-70b", "--input-tokens", "1000", "--output-tokens",
            "1000", "--tp", "2"]
    assert main(args) == EXIT_OK
    text = capsys.readouterr().out
    assert "tokens/s" in text and "bottleneck:" in text
    assert main([*args, "--json", "--disaggregate"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["feasible"] is True
    assert doc["kv_cache_per_token_bytes"] == 163840  # 80 layers x 8 KV heads x 128 x 2 x fp8
    assert doc["output_tokens_per_s"] > 0 and doc["time_per_output_token_s"] > 0
    assert doc["disaggregated"]["kv_transfer_s"] > 0


def test_infer_infeasible_usage_and_input_errors(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["infer", "dgx-h100", "llama3-70b", "--input-tokens", "128", "--output-tokens", "128"]
    assert main([*base, "--weight-dtype", "bf16"]) == EXIT_INFEASIBLE
    assert "INFEASIBLE: weights do not fit" in capsys.readouterr().out
    assert main([*base, "--draft-tokens", "4"]) == EXIT_USAGE
    assert "--draft-model or --draft-cost" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main([*base, "--tp", "0"])
    assert exc.value.code == EXIT_USAGE
    assert main(["infer", "dgx-h100", "no-such-model", "--input-tokens", "1",
                 "--output-tokens", "1"]) == EXIT_INPUT
    assert "no-such-model: no such file" in capsys.readouterr().err
