"""The optional per-class bandwidth of memory-bound kernels: strict loading, the A100
preset's published figures, and how the training step uses them."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from model_helpers import write

from netio.errors import ModelInputError
from netio.model import load_execution, load_model, load_system, train
from netio.model.calibrate import system_to_dict
from netio.model.schema import PRESET_DIR, System, system_from_dict
from netio.model.training import _memory_bound

KEY = "accelerator.memory_bound_bandwidth_bytes_per_s"

# FlashAttention (Dao et al. 2022, arXiv 2205.14135) Fig. 1 right, PyTorch attention on
# GPT-2 medium: batch 64 x 16 heads x 1024 x 1024 fp16 score elements; mask 4.53 ms,
# softmax 3.68 ms, dropout 4.62 ms, read off the figure (see the preset's comment).
SCORE_ELEMENTS = 64 * 16 * 1024 * 1024
FLASH_FIG1_S = {"elementwise": 4.53e-3, "reduction": 3.68e-3, "random": 4.62e-3}
# bytes per element: fp16 in and out, plus dropout's one-byte mask
FLASH_FIG1_BYTES = {"elementwise": 4 * SCORE_ELEMENTS, "reduction": 4 * SCORE_ELEMENTS,
                    "random": 5 * SCORE_ELEMENTS}


def _doc() -> dict[str, Any]:
    return tomllib.loads((PRESET_DIR / "system" / "dgx-a100-80gb.toml").read_text())


def _with(system: System, **bandwidth: float) -> System:
    acc = system.accelerator
    table = {**(acc.memory_bound_bandwidth_bytes_per_s or {}), **bandwidth}
    return dataclasses.replace(system, accelerator=dataclasses.replace(
        acc, memory_bound_bandwidth_bytes_per_s=table))


@pytest.mark.parametrize(("mutate", "key", "words"), [
    (lambda t: t.pop("random"), f"{KEY}.random", "missing"),
    (lambda t: t.update(softmax=1e12), f"{KEY}.softmax", "unknown key"),
    (lambda t: t.update(reduction=2.5e12), f"{KEY}.reduction", "<= 2039000000000.0"),
    (lambda t: t.update(elementwise=0), f"{KEY}.elementwise", "must be > 0"),
    (lambda t: t.update(elementwise="fast"), f"{KEY}.elementwise", "finite number"),
])
def test_strict_per_class_table(tmp_path: Path, mutate: Any, key: str, words: str) -> None:
    doc = _doc()
    mutate(doc["accelerator"]["memory_bound_bandwidth_bytes_per_s"])
    path = write(tmp_path / "sys.json", doc)
    with pytest.raises(ModelInputError) as info:
        load_system(path)
    assert info.value.key == key and info.value.path == str(path), str(info.value)
    assert words in str(info.value)


def test_not_a_table(tmp_path: Path) -> None:
    doc = _doc()
    doc["accelerator"]["memory_bound_bandwidth_bytes_per_s"] = 1e12
    with pytest.raises(ModelInputError) as info:
        load_system(write(tmp_path / "sys.json", doc))
    assert info.value.key == KEY


def test_preset_carries_the_flashattention_figures() -> None:
    table = load_system("dgx-a100-80gb").accelerator.memory_bound_bandwidth_bytes_per_s
    assert table is not None
    for kind, seconds in FLASH_FIG1_S.items():
        assert table[kind] == pytest.approx(FLASH_FIG1_BYTES[kind] / seconds, rel=1e-3)


def test_only_the_a100_preset_has_it() -> None:
    # No other system has a cited measurement: they keep the efficiency curve alone.
    for name in ("dgx-h100", "hgx-h200", "dgx-b200", "mi300x-8x400g"):
        assert load_system(name).accelerator.memory_bound_bandwidth_bytes_per_s is None


def test_round_trip_through_calibrate() -> None:
    system = load_system("dgx-a100-80gb")
    back = system_from_dict(system_to_dict(system))
    assert back.accelerator.memory_bound_bandwidth_bytes_per_s == \
        system.accelerator.memory_bound_bandwidth_bytes_per_s
    bare = dataclasses.replace(system, accelerator=dataclasses.replace(
        system.accelerator, memory_bound_bandwidth_bytes_per_s=None))
    assert "memory_bound_bandwidth_bytes_per_s" not in system_to_dict(bare)["accelerator"]


def test_large_kernel_takes_its_measured_time_small_one_the_curve() -> None:
    system = load_system("dgx-a100-80gb")
    # The published kernels themselves: each takes the time it was measured to take.
    for kind, seconds in FLASH_FIG1_S.items():
        got = _memory_bound(system, np.array([float(FLASH_FIG1_BYTES[kind])]), kind)
        assert float(got[0]) == pytest.approx(seconds, rel=1e-3)
    # 100 kB is launch-bound: the preset's curve gives 0.1 of 2.039 TB/s there, far below
    # any class's bandwidth, which must not make it faster.
    small = _memory_bound(system, np.array([1e5]), "elementwise")
    assert float(small[0]) == pytest.approx(1e5 / (0.1 * 2.039e12), rel=1e-9)


def test_absent_table_is_the_efficiency_curve() -> None:
    """Without the table a layer's kernels run at the curve: the same step as with every
    class at the peak bandwidth (which the curve, <= 1, never exceeds)."""
    base = load_system("dgx-a100-80gb")
    bare = dataclasses.replace(base, accelerator=dataclasses.replace(
        base.accelerator, memory_bound_bandwidth_bytes_per_s=None))
    peak = base.accelerator.memory_bandwidth_bytes_per_s
    at_peak = _with(base, elementwise=peak, reduction=peak, random=peak)
    model, ex = load_model("gpt3-175b"), load_execution("korthikanti-175b-seqsel")
    assert train(bare, model, ex).step_s == train(at_peak, model, ex).step_s
    assert train(base, model, ex).step_s > train(bare, model, ex).step_s


def test_each_kernel_is_charged_to_its_class() -> None:
    """Dropout and bias-dropout-add draw random numbers; with dropout off, the random
    class must not matter, and the bias-add is elementwise."""
    system = load_system("dgx-a100-80gb")
    ex = load_execution("korthikanti-175b-seqsel")
    model = load_model("gpt3-175b")
    nodrop = dataclasses.replace(model, dropout=False)
    slow_random = _with(system, random=0.5e12)
    slow_elementwise = _with(system, elementwise=0.5e12)
    assert train(slow_random, nodrop, ex).step_s == train(system, nodrop, ex).step_s
    assert train(slow_elementwise, nodrop, ex).step_s > train(system, nodrop, ex).step_s
    assert train(slow_random, model, ex).step_s > train(system, model, ex).step_s
    # Layer norm and softmax are reductions.
    assert train(_with(system, reduction=0.5e12), model, ex).step_s > \
        train(system, model, ex).step_s
