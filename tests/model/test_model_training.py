"""The training-step and memory models: feasibility, vectorisation, properties."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netio.errors import ModelInputError
from netio.model import Infeasible, Layouts, evaluate, load_model, load_system, train
from netio.model.memory import layer_params, params_per_rank
from netio.model.schema import (
    Attention,
    Curve,
    Execution,
    Link,
    Model,
    System,
    execution_from_dict,
)

GIB = float(1 << 30)


def ex(**kw: Any) -> Execution:
    base: dict[str, Any] = dict(
        tensor_parallel=8, pipeline_parallel=4, interleave=1, data_parallel=2,
        expert_parallel=1, context_parallel=1, sequence_parallel=True, zero_stage=1,
        micro_batch_size=1, global_batch_size=32, recompute="selective", attention="flash",
        compute_dtype="bf16", grad_reduce_dtype="fp32", overlap_grad_reduce=True,
        overlap_tp_comm=False)
    base.update(kw)
    return execution_from_dict(base)


def test_parameter_count_matches_the_published_sizes() -> None:
    # GPT-3 175B (Brown et al. 2020 Table 2.1: 175.0B), Llama 3 70B (Meta: 70.6B),
    # Mixtral 8x7B (Jiang et al. 2024: 46.7B total).
    for name, published in (("gpt3-175b", 175.0e9), ("llama3-70b", 70.6e9),
                            ("mixtral-8x7b", 46.7e9)):
        m = load_model(name)
        lay = Layouts.from_execution(ex(tensor_parallel=1, pipeline_parallel=1,
                                        data_parallel=1, global_batch_size=1))
        total = float(params_per_rank(m, lay)[0])  # one rank holds everything
        assert total == pytest.approx(published, rel=0.01), name


def test_megatron_bytes_per_parameter() -> None:
    # Megatron-LM theoretical_memory_usage.py: 18 bytes per parameter without the
    # distributed optimizer (bf16 weight, fp32 gradient, 12 bytes of Adam state), and
    # 6 + 12/d with it.
    m = load_model("gpt3-175b")
    system = load_system("dgx-h100")
    for zero, d, per_param in ((0, 4, 18.0), (1, 4, 6 + 12 / 4), (1, 16, 6 + 12 / 16)):
        r = train(system, m, ex(zero_stage=zero, data_parallel=d, global_batch_size=16 * d,
                                pipeline_parallel=16))
        params = float(params_per_rank(m, Layouts.from_execution(ex(pipeline_parallel=16)))[0])
        mem = r.memory
        assert (mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes) / params \
            == pytest.approx(per_param)


def test_infeasible_memory_names_the_term_and_the_excess() -> None:
    r = train(load_system("dgx-a100-80gb"), load_model("gpt3-175b"),
              ex(tensor_parallel=8, pipeline_parallel=1, data_parallel=1, zero_stage=0,
                 global_batch_size=8, recompute="none", attention="unfused",
                 sequence_parallel=False))
    assert not r.feasible
    assert r.infeasible_reason.startswith("memory: needs ")
    assert "GiB over" in r.infeasible_reason and "largest term optimizer state" \
        in r.infeasible_reason
    over = (r.memory.total_bytes - r.memory.capacity_bytes) / GIB
    assert f"({over:.2f} GiB over)" in r.infeasible_reason
    assert "INFEASIBLE" in r.to_text() and r.to_json_dict()["feasible"] is False


@pytest.mark.parametrize(("kw", "reason", "words"), [
    (dict(global_batch_size=33), Infeasible.BATCH_NOT_DIVISIBLE, "not a multiple"),
    (dict(pipeline_parallel=64, interleave=2, global_batch_size=32, data_parallel=1),
     Infeasible.TOO_FEW_LAYERS, "96 layers cannot fill"),
    (dict(tensor_parallel=5), Infeasible.HEADS_NOT_DIVISIBLE, "attention heads"),
    (dict(context_parallel=3), Infeasible.SEQUENCE_NOT_DIVISIBLE, "context_parallel 3"),
])
def test_layout_errors_are_reported_not_raised(kw: dict[str, Any], reason: Infeasible,
                                               words: str) -> None:
    system, model = load_system("dgx-h100"), load_model("gpt3-175b")
    r = train(system, model, ex(**kw))
    assert not r.feasible and words in r.infeasible_reason
    out = evaluate(system, model, Layouts.from_execution(ex(**kw)))
    assert int(out.infeasible[0]) == reason


def test_breakdown_adds_up_and_names_the_bottleneck() -> None:
    r = train(load_system("dgx-h100"), load_model("llama3-70b"), ex(
        pipeline_parallel=4, interleave=5, global_batch_size=64))
    assert r.feasible
    assert sum(r.breakdown_s.values()) == pytest.approx(r.step_s, rel=1e-9)
    assert r.bottleneck == max(r.breakdown_s, key=lambda k: r.breakdown_s[k])
    assert 0.2 < r.mfu <= r.hfu < 1.0
    doc = r.to_json_dict()
    assert doc["step_s"] == r.step_s and "memory_per_accelerator_bytes" in doc


def test_moe_context_and_expert_parallel_terms_appear() -> None:
    system, model = load_system("dgx-h100"), load_model("mixtral-8x7b")
    r = train(system, model, ex(tensor_parallel=2, pipeline_parallel=1, data_parallel=8,
                                expert_parallel=8, context_parallel=2,
                                global_batch_size=64))
    assert r.feasible, r.infeasible_reason
    assert r.breakdown_s["ep_communication"] > 0
    assert r.breakdown_s["dp_communication"] >= 0
    bad = train(system, model, ex(tensor_parallel=2, pipeline_parallel=1, data_parallel=6,
                                  expert_parallel=3, global_batch_size=60))
    assert not bad.feasible and "expert_parallel 3" in bad.infeasible_reason


def test_weight_streaming_systems_are_refused_with_a_reason() -> None:
    with pytest.raises(ModelInputError, match="weight_streaming"):
        train(load_system("cs3-weight-streaming"), load_model("gpt3-175b"), ex())


def _grid(n: int, seed: int) -> tuple[Layouts, list[Execution]]:
    rng = np.random.default_rng(seed)
    exs = [ex(tensor_parallel=int(rng.choice([1, 2, 4, 8])),
              pipeline_parallel=(pp := int(rng.choice([1, 2, 4, 8]))),
              interleave=int(rng.choice([1, 2])) if pp > 1 else 1,
              data_parallel=(dp := int(rng.choice([1, 2, 4]))),
              micro_batch_size=(mb := int(rng.choice([1, 2]))),
              global_batch_size=dp * mb * int(rng.choice([4, 8, 16])),
              zero_stage=int(rng.integers(0, 4)),
              recompute=str(rng.choice(["none", "selective", "full"])),
              attention=str(rng.choice(["flash", "unfused"])),
              sequence_parallel=bool(rng.integers(0, 2)),
              overlap_grad_reduce=bool(rng.integers(0, 2)),
              overlap_tp_comm=bool(rng.integers(0, 2)),
              async_tp_grad_comm=bool(rng.integers(0, 2)),
              grad_accumulation_fusion=bool(rng.integers(0, 2))) for _ in range(n)]
    singles = [Layouts.from_execution(e) for e in exs]
    stacked = Layouts(*[np.concatenate([getattr(s, f.name) for s in singles])
                        if f.name not in ("compute_dtype", "grad_reduce_dtype")
                        else getattr(singles[0], f.name)
                        for f in dataclasses.fields(Layouts)])
    return stacked, exs


def test_vectorised_equals_one_at_a_time() -> None:
    system, model = load_system("dgx-h100"), load_model("llama3-8b")
    lay, exs = _grid(40, seed=7)
    many = evaluate(system, model, lay)
    for i, e in enumerate(exs):
        r = train(system, model, e)
        assert r.step_s == float(many.step_s[i])
        assert r.memory.total_bytes == float(many.memory.total_bytes[i])
        assert r.feasible == (int(many.infeasible[i]) == 0)


def _scaled(system: System, bw: float, mem: float) -> System:
    node = system.node
    up = Link(node.scale_up.alpha_s, node.scale_up.beta_s_per_byte / bw, node.scale_up.efficiency)
    out = Link(node.scale_out.alpha_s, node.scale_out.beta_s_per_byte / bw,
               node.scale_out.efficiency)
    acc = dataclasses.replace(
        system.accelerator, memory_bytes=system.accelerator.memory_bytes * mem,
        memory_bandwidth_bytes_per_s=system.accelerator.memory_bandwidth_bytes_per_s * bw)
    return dataclasses.replace(system, accelerator=acc,
                               node=dataclasses.replace(node, scale_up=up, scale_out=out))


MODELS = {name: load_model(name) for name in ("llama3-8b", "gpt3-175b", "mixtral-8x7b")}


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), bw=st.floats(1.0, 16.0), mem=st.floats(1.0, 4.0),
       name=st.sampled_from(sorted(MODELS)))
def test_more_bandwidth_never_slower_more_memory_never_infeasible(
        seed: int, bw: float, mem: float, name: str) -> None:
    model: Model = MODELS[name]
    base = load_system("dgx-h100")
    lay, _ = _grid(12, seed)
    a = evaluate(base, model, lay)
    b = evaluate(_scaled(base, bw, 1.0), model, lay)
    c = evaluate(_scaled(base, 1.0, mem), model, lay)
    assert np.all(b.step_s <= a.step_s * (1 + 1e-12))
    assert not np.any((a.infeasible == 0) & (c.infeasible != 0))


def test_layer_params_count_gqa_and_gating() -> None:
    # Llama 3 8B layer: q 4096x4096, k and v 4096x1024, o 4096x4096, three 4096x14336 MLP
    # matrices (config.json); biases are counted by netio (GPT style), Llama has none.
    split, _ = layer_params(load_model("llama3-8b"))
    weights = 4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    assert split == pytest.approx(weights, rel=1e-3)


def test_uneven_layers_load_the_fullest_stage() -> None:
    # 126 layers on 16 stages: the fullest stage has ceil(126/16) = 8 layers, as with 128.
    system = load_system("dgx-h100")
    base = load_model("llama3-8b")
    e = ex(pipeline_parallel=16, data_parallel=1, global_batch_size=64)
    a = train(system, dataclasses.replace(base, layers=126), e)
    b = train(system, dataclasses.replace(base, layers=128), e)
    assert a.feasible and a.step_s == b.step_s
    assert a.collectives["tensor_parallel"].endswith("all-gather + reduce-scatter")


def test_fused_attention_runs_at_its_own_efficiency() -> None:
    # Halving the FlashAttention kernel's efficiency doubles its compute-bound time: the
    # step grows, and by less than the whole compute term.
    system, model = load_system("dgx-h100"), load_model("llama3-8b")
    slow = dataclasses.replace(system, accelerator=dataclasses.replace(
        system.accelerator, fused_attention_efficiency=system.accelerator
        .fused_attention_efficiency / 2))
    e = ex(pipeline_parallel=1, data_parallel=8, global_batch_size=64)
    a, b = train(system, model, e), train(slow, model, e)
    assert a.step_s < b.step_s < a.step_s + a.breakdown_s["compute"]
    unfused = ex(pipeline_parallel=1, data_parallel=8, global_batch_size=64,
                 attention="unfused", recompute="selective")
    assert train(system, model, unfused).step_s == train(slow, model, unfused).step_s


def test_any_layout_on_any_preset_gives_a_finite_step() -> None:
    # Wide random layouts, valid or not, on every GPU system and model preset: no floating
    # point error, a finite positive step, and a reason code for every element.
    from netio.model import load_execution, preset_names

    rng = np.random.default_rng(3)
    n = 400
    base = Layouts.from_execution(load_execution("llama3-70b-64gpu"))
    pp = rng.choice([1, 2, 3, 4, 8, 16, 64, 128], n)
    lay = dataclasses.replace(base, **{k: np.asarray(v) for k, v in dict(
        tensor_parallel=rng.choice([1, 2, 3, 4, 8, 16, 32], n), pipeline_parallel=pp,
        interleave=np.where(pp > 1, rng.choice([1, 2, 3, 5], n), 1),
        data_parallel=rng.choice([1, 2, 3, 4, 8, 64, 512], n),
        expert_parallel=rng.choice([1, 2, 4, 8], n),
        context_parallel=rng.choice([1, 2, 4, 16], n),
        sequence_parallel=rng.integers(0, 2, n).astype(bool), zero_stage=rng.integers(0, 4, n),
        micro_batch_size=rng.choice([1, 2, 4, 16], n),
        global_batch_size=rng.choice([1, 7, 64, 1024, 4096], n),
        recompute=rng.integers(0, 3, n), attention=rng.integers(0, 2, n),
        overlap_grad_reduce=rng.integers(0, 2, n).astype(bool),
        overlap_tp_comm=rng.integers(0, 2, n).astype(bool),
        async_tp_grad_comm=rng.integers(0, 2, n).astype(bool),
        grad_accumulation_fusion=rng.integers(0, 2, n).astype(bool)).items()})
    for system_name in preset_names("system"):
        system = load_system(system_name)
        if system.weight_streaming is not None:
            continue
        for model_name in preset_names("model"):
            with np.errstate(all="raise"):
                r = evaluate(system, load_model(model_name), lay)
            assert np.all(np.isfinite(r.step_s) & (r.step_s > 0)), (system_name, model_name)
            assert set(np.unique(r.infeasible)) <= {int(x) for x in Infeasible}


def test_tp_comm_overlap_hides_sequence_parallel_collectives_behind_gemms() -> None:
    system, model = load_system("dgx-h100"), load_model("llama3-70b")
    kw = dict(pipeline_parallel=4, global_batch_size=64)
    plain = train(system, model, ex(**kw))
    hidden = train(system, model, ex(overlap_tp_comm=True, **kw))
    assert hidden.breakdown_s["tp_communication"] < plain.breakdown_s["tp_communication"]
    assert hidden.step_s < plain.step_s
    assert hidden.breakdown_s["compute"] == plain.breakdown_s["compute"]
    # Megatron overlaps only the sequence-parallel gathers and reduce-scatters.
    no_sp = dict(sequence_parallel=False, **kw)
    assert train(system, model, ex(overlap_tp_comm=True, **no_sp)).step_s \
        == train(system, model, ex(**no_sp)).step_s


def _tp_all_reduce_s(system: System, model: Model, micro_batch: int) -> float:
    """One tensor-parallel all-reduce of a layer's activations over the 8 GPUs of a node,
    from the collective model (the quantity the async path hides)."""
    from netio.model.collectives import Collective, best_time, paths
    from netio.model.layout import ranks_per_node

    t = np.asarray([8.0])
    act = np.asarray([2.0 * micro_batch * model.sequence_length * model.hidden_size])
    time, _ = best_time(Collective.ALL_REDUCE, act, paths(system, t, ranks_per_node(t, 1, 8)))
    return float(time[0])


def test_async_tp_grad_comm_hides_backward_collectives_but_not_for_free() -> None:
    # Megatron's column-parallel backward (QKV and FC1) all-reduces the input gradient on
    # a second stream under the weight-gradient GEMM. Without sequence parallelism that
    # is 2 of the 6 all-reduces per layer with full recomputation (forward, recomputed
    # forward, backward: 2 each): the saving is at most 2 all-reduces per layer and at
    # least 2 x (1 - share) of what the GEMMs can cover; it never changes the GEMMs.
    from netio.model.training import COMM_SM_SHARE

    system, model = load_system("dgx-a100-80gb"), load_model("gpt3-175b")
    kw = dict(tensor_parallel=8, pipeline_parallel=8, data_parallel=1, global_batch_size=8,
              micro_batch_size=1, recompute="full", sequence_parallel=False,
              attention="unfused", compute_dtype="fp16", grad_reduce_dtype="fp16",
              overlap_grad_reduce=False, grad_accumulation_fusion=False)
    sync = train(system, model, ex(async_tp_grad_comm=False, **kw))
    hidden = train(system, model, ex(async_tp_grad_comm=True, **kw))
    assert hidden.breakdown_s["compute"] == sync.breakdown_s["compute"]
    saved = sync.breakdown_s["tp_communication"] - hidden.breakdown_s["tp_communication"]
    ar = _tp_all_reduce_s(system, model, 1)
    per_layer = saved / (8 * (model.layers / 8))  # 8 micro-batches, 12 layers per stage
    assert 0.0 < per_layer <= 2 * ar * (1 - COMM_SM_SHARE) + 1e-12
    assert per_layer > 2 * ar * (1 - COMM_SM_SHARE) * 0.5
    # with sequence parallelism the re-gather and the reduce-scatter are hidden instead
    sp = dict(kw, sequence_parallel=True, recompute="selective")
    assert train(system, model, ex(async_tp_grad_comm=True, **sp)).breakdown_s[
        "tp_communication"] < train(system, model, ex(async_tp_grad_comm=False, **sp)) \
        .breakdown_s["tp_communication"]


def test_overlapped_collective_costs_at_least_its_sm_share() -> None:
    # A collective far shorter than its GEMM still takes SMs from it: the pair is never
    # cheaper than the GEMM plus share x the collective (and never dearer than serial).
    from netio.model.training import COMM_SM_SHARE, _overlapped

    comm = np.asarray([1.0, 1.0, 5.0])
    gemm = np.asarray([10.0, 1.0, 1.0])
    added = _overlapped(comm, gemm)
    assert list(added) == pytest.approx([COMM_SM_SHARE, COMM_SM_SHARE, 4.0])
    assert np.all(added <= comm)


def test_gradient_accumulation_fusion_removes_the_accumulation_pass() -> None:
    # Unfused, every micro-batch writes a compute-type weight gradient and a separate
    # kernel adds it into the main gradient (read it, read and write the accumulator);
    # fused, the weight-gradient GEMM does the add in its epilogue, which on these
    # compute-bound GEMMs costs no time. The difference is the pass's traffic.
    system, model = load_system("dgx-a100-80gb"), load_model("gpt3-175b")
    kw = dict(tensor_parallel=8, pipeline_parallel=8, data_parallel=1, global_batch_size=8,
              micro_batch_size=1, recompute="full", sequence_parallel=False,
              attention="unfused", compute_dtype="fp16", grad_reduce_dtype="fp32",
              overlap_grad_reduce=False, async_tp_grad_comm=False)
    plain = train(system, model, ex(grad_accumulation_fusion=False, **kw))
    fused = train(system, model, ex(grad_accumulation_fusion=True, **kw))
    assert fused.breakdown_s["compute"] == plain.breakdown_s["compute"]
    saved = plain.breakdown_s["memory_bound"] - fused.breakdown_s["memory_bound"]
    params_rank = 12 * model.hidden_size ** 2 / 8 * (model.layers / 8)  # 12 h^2 per layer
    traffic = params_rank * (2 + 2 * 4) * 8  # per micro-batch: read fp16, read+write fp32
    bw = system.accelerator.memory_bandwidth_bytes_per_s
    assert traffic / bw < saved < traffic / (0.5 * bw)


def test_new_execution_switches_default_to_current_megatron() -> None:
    base = {f.name: getattr(ex(), f.name) for f in dataclasses.fields(Execution)
            if f.name not in ("async_tp_grad_comm", "grad_accumulation_fusion")}
    base["recompute"] = base["recompute"].name.lower()
    base["attention"] = base["attention"].name.lower()
    e = execution_from_dict(base)
    assert e.async_tp_grad_comm and e.grad_accumulation_fusion
    with pytest.raises(ModelInputError, match="async_tp_grad_comm"):
        execution_from_dict(dict(base, async_tp_grad_comm="yes"))


def _attention_test_system(score: float | None, value: float | None) -> System:
    """The A100 preset with a flat matmul curve of 0.8, memory too fast to matter, and
    the unfused attention products flat at ``score`` and ``value`` of peak (or absent)."""
    base = load_system("dgx-a100-80gb")
    acc = dataclasses.replace(
        base.accelerator, matmul_efficiency=Curve((1.0,), (0.8,)),
        memory_bandwidth_bytes_per_s=1e18,
        attention_score_efficiency=None if score is None else Curve((1.0,), (score,)),
        attention_over_value_efficiency=None if value is None else Curve((1.0,), (value,)))
    return dataclasses.replace(base, accelerator=acc)


def test_unfused_attention_products_run_at_their_measured_rate() -> None:
    # Spec: forward Q K^T and P V, F = 2 b (a/t) s^2 d FLOPs each; backward dP = dO V^T
    # (shaped as Q K^T) and dV, dQ, dK (shaped as P V). At flat rates e_s, e_v against a
    # matmul rate e_m, a step of m micro-batches on one pipeline stage of L layers (no
    # recomputation, no data parallelism) grows by L m F / peak (2/e_s + 4/e_v - 6/e_m).
    model = load_model("megatron-22b")
    e = ex(pipeline_parallel=1, data_parallel=1, micro_batch_size=2, global_batch_size=6,
           recompute="none", attention="unfused", sequence_parallel=False,
           compute_dtype="fp16", grad_reduce_dtype="fp16", overlap_grad_reduce=False)
    plain = train(_attention_test_system(None, None), model, e)
    slow = train(_attention_test_system(0.25, 0.4), model, e)
    b, t, s, d = 2, 8, model.sequence_length, model.head_dim
    f = 2 * b * (model.attention_heads / t) * s * s * d
    expected = model.layers * 3 * f / 312e12 * (2 / 0.25 + 4 / 0.4 - 6 / 0.8)
    assert slow.step_s - plain.step_s == pytest.approx(expected, rel=1e-9)
    # Rates above the matmul curve do not speed the products up; FlashAttention ignores
    # the unfused rates.
    assert train(_attention_test_system(0.9, 0.9), model, e).step_s == plain.step_s
    flash = dataclasses.replace(e, attention=Attention.FLASH)
    assert (train(_attention_test_system(0.25, 0.4), model, flash).step_s
            == train(_attention_test_system(None, None), model, flash).step_s)
