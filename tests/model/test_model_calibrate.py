"""Calibration: the alpha-beta fit on synthetic profiles with known answers, the
efficiency curve, the per-size error, and a written system file that the other
subcommands read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from netio.errors import ModelInputError
from netio.fabric_profile import SCHEMA_VERSION, fit_alpha_beta, profile_from_dict
from netio.model import load_model, load_system, train
from netio.model.calibrate import (
    calibrate_link,
    compute_system,
    system_to_dict,
)
from netio.model.inference import Request, infer
from netio.model.schema import load_execution, system_from_dict

ALPHA, BETA = 3e-6, 1 / 12.5e9  # 3 us, 100 Gb/s


def _profile(noise: float = 0.0, seed: int = 0) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    sizes = [2 ** k for k in range(6, 25, 2)]
    points = []
    for n in sizes:
        t = (ALPHA + BETA * n) * (1 + noise * rng.standard_normal())
        # A window-limited stream reaches less than line rate at small sizes.
        bw = 1 / BETA * n / (n + 64 * 1024)
        points.append({"message_bytes": n, "latency_s": t, "bandwidth_bytes_per_s": bw})
    return {"schema": "netio.fabric_profile", "version": SCHEMA_VERSION, "backend": "soft",
            "device": "rxe0", "gid": "fe80::1", "mtu_bytes": 4096, "hosts": ["a", "b"],
            "points": points,
            "fit": {"alpha_s": ALPHA, "beta_s_per_byte": BETA, "max_relative_error": 0.0},
            "efficiency": [{"message_bytes": 64, "efficiency": 0.01}]}


def test_fit_recovers_known_alpha_beta() -> None:
    cal = calibrate_link(profile_from_dict(_profile()))
    assert cal.alpha_s == pytest.approx(ALPHA, rel=1e-9)
    assert cal.beta_s_per_byte == pytest.approx(BETA, rel=1e-9)
    assert cal.max_latency_error < 1e-9
    # Efficiency: measured bandwidth over 1/beta, i.e. n / (n + 64 KiB) here.
    for e in cal.per_size:
        assert e.efficiency == pytest.approx(e.message_bytes / (e.message_bytes + 65536))
    assert cal.bandwidth_bits_per_s == pytest.approx(100e9)


def test_fit_with_noise_reports_per_size_error() -> None:
    cal = calibrate_link(profile_from_dict(_profile(noise=0.05, seed=1)))
    assert cal.alpha_s == pytest.approx(ALPHA, rel=0.3)
    assert cal.beta_s_per_byte == pytest.approx(BETA, rel=0.1)
    errs = [e.latency_error for e in cal.per_size]
    assert 0 < max(errs) < 0.25
    # The errors are the model against the points, recomputed here independently.
    for e in cal.per_size:
        model = cal.alpha_s + cal.beta_s_per_byte * e.message_bytes
        assert e.latency_error == pytest.approx(abs(model / e.latency_s - 1))


def test_fit_refuses_degenerate_input() -> None:
    with pytest.raises(ModelInputError, match="two sizes"):
        fit_alpha_beta([64], [1e-6])
    # Latency falling with size: alpha is refitted at 0 and beta stays positive.
    a, b = fit_alpha_beta([64, 1 << 20], [5e-6, 1e-4])
    assert a >= 0 and b > 0


def test_system_round_trip_and_calibrate_cli(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from netio.cli.model import EXIT_INPUT, EXIT_OK, main

    for name in ("dgx-h100", "dgx-a100-80gb", "cs3-weight-streaming", "mi300x-8x400g"):
        s = load_system(name)
        assert system_from_dict(system_to_dict(s)) == s
    prof = tmp_path / "profile.json"
    prof.write_text(json.dumps(_profile(noise=0.02)))
    out = tmp_path / "calibrated.json"
    assert main(["calibrate", str(prof), "--system", "dgx-h100", "--output", str(out),
                 "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["sizes"]) == 10 and doc["system_file"] == str(out)
    cal = load_system(out)
    assert cal.node.scale_out.beta_s_per_byte == pytest.approx(doc["beta_s_per_byte"])
    # The other subcommands accept it; a 100 Gb/s NIC makes a multi-node step slower than
    # the preset's 400 Gb/s.
    model, ex = load_model("llama3-70b"), load_execution("llama3-70b-64gpu")
    assert train(cal, model, ex).step_s > train(load_system("dgx-h100"), model, ex).step_s
    assert infer(cal, load_model("llama3-8b"), Request(128, 128)).feasible
    assert main(["calibrate", str(tmp_path / "none.json"), "--system", "dgx-h100",
                 "--output", str(out)]) == EXIT_INPUT


def test_compute_system_from_measurements() -> None:
    s = compute_system("cpu", [(1e6, 1e9), (1e9, 5e10), (1e8, 4e10)],
                       [(1e5, 2e10), (1e8, 1e10)], 8e9)
    acc = s.accelerator
    assert acc.peak("fp32") == 5e10 and acc.memory_bandwidth_bytes_per_s == 2e10
    assert float(acc.matmul_efficiency.at(1e6)[()]) == pytest.approx(0.02)
    assert float(acc.matmul_efficiency.at(1e9)[()]) == pytest.approx(1.0)
    assert float(acc.memory_efficiency.at(1e8)[()]) == pytest.approx(0.5)
