"""Strict loading of System, Model, Execution and fabric-profile files, and the presets."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from model_helpers import profile_doc, write

from netio.errors import FabricProfileError, ModelInputError
from netio.fabric_profile import (
    SCHEMA_VERSION,
    load_fabric_profile,
    profile_from_dict,
    profile_to_dict,
)
from netio.model.schema import (
    PRESET_DIR,
    Recompute,
    load_execution,
    load_model,
    load_system,
    preset_names,
)

EXECUTION = dict(
    tensor_parallel=8, pipeline_parallel=2, interleave=1, data_parallel=2, expert_parallel=1,
    context_parallel=1, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
    global_batch_size=16, recompute="selective", attention="flash", compute_dtype="bf16",
    grad_reduce_dtype="fp32", overlap_grad_reduce=True, overlap_tp_comm=False)


def test_execution_from_toml_and_json(tmp_path: Path) -> None:
    toml = tmp_path / "ex.toml"
    toml.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in EXECUTION.items()))
    a = load_execution(toml)
    b = load_execution(write(tmp_path / "ex.json", EXECUTION))
    assert a == b and a.recompute is Recompute.SELECTIVE and a.accelerators == 32


@pytest.mark.parametrize(("change", "key", "words"), [
    ({"tensor_paralel": 8}, "tensor_paralel", "unknown key"),
    ({"tensor_parallel": None}, "tensor_parallel", "missing"),
    ({"tensor_parallel": "8"}, "tensor_parallel", "must be an integer"),
    ({"tensor_parallel": 0}, "tensor_parallel", "must be >= 1"),
    ({"sequence_parallel": 1}, "sequence_parallel", "true or false"),
    ({"recompute": "some"}, "recompute", "none, selective, full"),
    ({"compute_dtype": "fp4"}, "compute_dtype", "must be one of"),
    ({"zero_stage": 4}, "zero_stage", "0, 1, 2 or 3"),
    ({"pipeline_parallel": 1, "interleave": 2}, "interleave", "pipeline_parallel > 1"),
])
def test_execution_errors_name_file_and_key(tmp_path: Path, change: dict[str, Any], key: str,
                                            words: str) -> None:
    doc = {**EXECUTION, **change}
    doc = {k: v for k, v in doc.items() if v is not None}
    path = write(tmp_path / "bad.json", doc)
    with pytest.raises(ModelInputError) as info:
        load_execution(path)
    assert info.value.key == key and info.value.path == str(path)
    assert str(info.value).startswith(f"{path}: {key}: ") and words in str(info.value)


def _preset_doc(kind: str, name: str) -> dict[str, Any]:
    return tomllib.loads((PRESET_DIR / kind / f"{name}.toml").read_text())


@pytest.mark.parametrize(("mutate", "key"), [
    (lambda d: d["accelerator"].pop("memory_bytes"), "accelerator.memory_bytes"),
    (lambda d: d["node"].update(nics="8"), "node.nics"),
    (lambda d: d["accelerator"]["peak_flops_per_s"].update(fp5=1.0),
     "accelerator.peak_flops_per_s.fp5"),
    (lambda d: d["fabric"].update(topology="torus"), "fabric.topology"),
    (lambda d: d["fabric"].update(oversubscription_ratio=0.5), "fabric.oversubscription_ratio"),
    (lambda d: d["accelerator"].update(matmul_efficiency_by_flops=[[1e9, 0.5], [1e8, 0.6]]),
     "accelerator.matmul_efficiency_by_flops"),
    (lambda d: d["accelerator"].update(memory_efficiency_by_bytes=[[1e9, 1.5]]),
     "accelerator.memory_efficiency_by_bytes"),
    (lambda d: d["accelerator"].pop("fused_attention_efficiency"),
     "accelerator.fused_attention_efficiency"),
    (lambda d: d["accelerator"].update(fused_attention_efficiency=1.5),
     "accelerator.fused_attention_efficiency"),
    (lambda d: d["accelerator"].pop("attention_over_value_efficiency_by_head_dim"),
     "accelerator.attention_over_value_efficiency_by_head_dim"),
    (lambda d: d["accelerator"].pop("attention_score_efficiency_by_head_dim"),
     "accelerator.attention_score_efficiency_by_head_dim"),
    (lambda d: d["accelerator"].update(attention_score_efficiency_by_head_dim=[[96, 1.2]]),
     "accelerator.attention_score_efficiency_by_head_dim"),
    (lambda d: d["accelerator"].update(
        attention_over_value_efficiency_by_head_dim=[[128, 0.4], [96, 0.3]]),
     "accelerator.attention_over_value_efficiency_by_head_dim"),
    (lambda d: d.update(networks={}), "networks"),
    (lambda d: d.update(network={"scale_up": {"alpha_s": 1e-6}}),
     "network.scale_up.beta_s_per_byte"),
])
def test_system_errors_name_file_and_key(tmp_path: Path, mutate: Any, key: str) -> None:
    doc = _preset_doc("system", "dgx-a100-80gb")
    mutate(doc)
    path = write(tmp_path / "sys.json", doc)
    with pytest.raises(ModelInputError) as info:
        load_system(path)
    assert info.value.key == key and info.value.path == str(path), str(info.value)


@pytest.mark.parametrize(("mutate", "key"), [
    (lambda d: d.update(kv_heads=5), "kv_heads"),
    (lambda d: d.update(hidden_size=1000), "attention_heads"),
    (lambda d: d.pop("dropout"), "dropout"),
    (lambda d: d.update(moe={"experts": 2, "top_k": 4, "shared_experts": 0,
                             "capacity_factor": 1.0, "expert_ffn_hidden_size": 8}), "moe.top_k"),
    (lambda d: d.update(moe={"experts": 8}), "moe.top_k"),
])
def test_model_errors_name_file_and_key(tmp_path: Path, mutate: Any, key: str) -> None:
    doc = _preset_doc("model", "gpt3-175b")
    mutate(doc)
    path = write(tmp_path / "m.json", doc)
    with pytest.raises(ModelInputError) as info:
        load_model(path)
    assert info.value.key == key and info.value.path == str(path), str(info.value)


def test_unreadable_and_unparsable_inputs(tmp_path: Path) -> None:
    with pytest.raises(ModelInputError, match="not a system preset"):
        load_system(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = ")
    with pytest.raises(ModelInputError, match="not TOML"):
        load_model(bad)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("[1, 2]")
    with pytest.raises(ModelInputError, match="table of keys"):
        load_model(bad_json)


def test_every_preset_loads() -> None:
    assert {"dgx-a100-80gb", "dgx-h100", "hgx-h200", "dgx-b200", "mi300x-8x400g",
            "cs3-weight-streaming"} <= set(preset_names("system"))
    for name in preset_names("system"):
        load_system(name)
    for name in preset_names("model"):
        load_model(name)
    for name in preset_names("execution"):
        load_execution(name)
    cs3 = load_system("cs3-weight-streaming")
    assert cs3.weight_streaming is not None and cs3.weight_streaming.optimizer_on_memory_service


NUMBER = re.compile(r"^\s*[a-z0-9_]+\s*=\s*[\[\d]")


@pytest.mark.parametrize("path", sorted((PRESET_DIR / "system").glob("*.toml"))
                         + sorted((PRESET_DIR / "model").glob("*.toml")), ids=lambda p: p.stem)
def test_every_preset_number_has_a_source(path: Path) -> None:
    """Each numeric line carries a trailing comment (its source or a pointer to the
    comment block above it that gives one)."""
    missing = [line for line in path.read_text().splitlines()
               if NUMBER.match(line) and "#" not in line]
    assert not missing, missing


def test_fabric_profile_roundtrip_and_strictness(tmp_path: Path) -> None:
    doc = profile_doc()
    profile = profile_from_dict(doc)
    assert profile_to_dict(profile) == doc
    assert load_fabric_profile(write(tmp_path / "p.json", doc)) == profile
    cases = [
        (lambda d: d.update(colour="red"), "colour", "unknown key"),
        (lambda d: d.pop("mtu_bytes"), "mtu_bytes", "missing"),
        (lambda d: d["fit"].update(alpha_s="fast"), "fit.alpha_s", "must be a number"),
        (lambda d: d["points"][1].update(latency_us=3), "points[1].latency_us", "unknown key"),
        (lambda d: d.update(version=SCHEMA_VERSION + 1), "version", "reads version"),
        (lambda d: d["conditions"].update(pause_fraction=1.5), "conditions.pause_fraction",
         "must be in"),
        (lambda d: d["efficiency"].reverse(), "efficiency", "ascending"),
    ]
    for mutate, key, words in cases:
        bad = profile_doc()
        mutate(bad)
        path = write(tmp_path / "bad.json", bad)
        with pytest.raises(FabricProfileError) as info:
            load_fabric_profile(path)
        assert info.value.key == key and info.value.path == str(path), str(info.value)
        assert words in info.value.reason
    del doc["conditions"]
    assert profile_from_dict(doc).conditions is None


def test_system_reads_the_network_from_a_fabric_profile(tmp_path: Path) -> None:
    write(tmp_path / "link.json", profile_doc())
    doc = _preset_doc("system", "dgx-a100-80gb")
    doc["network"] = {"scale_out_profile": "link.json",
                      "scale_up": {"alpha_s": 1e-6, "beta_s_per_byte": 4e-12}}
    system = load_system(write(tmp_path / "sys.json", doc))
    assert system.node.scale_out.alpha_s == 4e-6
    assert system.node.scale_out.beta_s_per_byte == 2e-10
    assert float(system.node.scale_out.efficiency.at(1 << 20)[()]) == pytest.approx(0.9)
    assert system.node.scale_up.beta_s_per_byte == 4e-12
    assert system.scale_out_profile is not None
    assert system.scale_out_profile.conditions is not None
    bad = profile_doc()
    bad["fit"]["beta_s_per_bit"] = 1.0
    write(tmp_path / "link.json", bad)
    with pytest.raises(ModelInputError) as info:
        load_system(tmp_path / "sys.json")
    assert "link.json" in str(info.value) and "fit.beta_s_per_bit" in str(info.value)


def test_attention_product_curves_are_optional_and_read_by_head_dim(tmp_path: Path) -> None:
    doc = _preset_doc("system", "dgx-a100-80gb")
    acc = load_system(write(tmp_path / "with.json", doc)).accelerator
    assert acc.attention_score_efficiency is not None
    assert acc.attention_over_value_efficiency is not None
    # The preset's points (Anthony et al. 2024, Fig. 7: 92.4 and ~107.8 TFLOP/s of 312 at
    # head dimension 96) come back at their head dimension.
    assert float(acc.attention_score_efficiency.at(96)) == pytest.approx(92.4 / 312, abs=1e-3)
    assert float(acc.attention_over_value_efficiency.at(96)) == pytest.approx(107.8 / 312,
                                                                              abs=1e-3)
    for key in ("attention_score_efficiency_by_head_dim",
                "attention_over_value_efficiency_by_head_dim"):
        doc["accelerator"].pop(key)
    bare = load_system(write(tmp_path / "without.json", doc)).accelerator
    assert bare.attention_score_efficiency is None
    assert bare.attention_over_value_efficiency is None
