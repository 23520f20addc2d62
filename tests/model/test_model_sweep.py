"""The layout sweep: enumeration counts, the Pareto frontier against its definition, and
the vectorised sweep against the single-configuration models on sampled points."""

from __future__ import annotations

import numpy as np

from netio.model import load_execution, load_model, load_system, train
from netio.model.inference import Request, Serving, Speculation, infer
from netio.model.schema import Recompute
from netio.model.sweep import (
    InferSpace,
    TrainSpace,
    layout_execution,
    pareto_front,
    sweep_infer,
    sweep_infer_arrays,
    sweep_train,
    sweep_train_arrays,
    training_layouts,
)


def _brute_front(obj: np.ndarray) -> set[int]:
    """The definition: i is on the frontier unless some j is <= everywhere and < once
    (of equal points, the first)."""
    keep = set()
    for i in range(len(obj)):
        dominated = False
        for j in range(len(obj)):
            if j == i:
                continue
            if np.all(obj[j] <= obj[i]) and (np.any(obj[j] < obj[i]) or j < i):
                dominated = True
                break
        if not dominated:
            keep.add(i)
    return keep


def test_pareto_front_matches_the_definition() -> None:
    rng = np.random.default_rng(7)
    for n, k in ((1, 2), (50, 2), (300, 3), (700, 4)):
        obj = rng.integers(0, 20, size=(n, k)).astype(np.float64)  # many ties
        assert set(pareto_front(obj, block=64).tolist()) == _brute_front(obj)


def test_training_enumeration_counts() -> None:
    # 8 accelerators, one choice of everything else: (tp, pp) with tp * pp | 8 and tp up
    # to the node's 8 is 4 + 3 + 2 + 1 = 10 pairs; sequence parallelism on or off doubles
    # the 6 pairs with tp > 1 ... counted by hand: tp 1: 4, tp 2: 3 x 2, tp 4: 2 x 2,
    # tp 8: 1 x 2 = 16 layouts.
    space = TrainSpace(micro_batch_sizes=(1,), interleaves=(1,), recomputes=(Recompute.FULL,),
                       zero_stages=(1,), context_parallel=(1,))
    lay = training_layouts(load_system("dgx-h100"), load_model("llama3-8b"), [8],
                           load_execution("llama3-70b-64gpu"), space)
    assert len(lay) == 16
    assert set(lay.accelerators.tolist()) == {8}


def test_train_sweep_counts_frontier_and_scalar_agreement() -> None:
    system, model = load_system("dgx-h100"), load_model("llama3-70b")
    base = load_execution("llama3-70b-64gpu")
    s = sweep_train_arrays(system, model, [32, 64], base, price_per_accelerator_hour=2.0)
    r = s.step
    n = len(s.layouts)
    assert n > 10_000
    res = sweep_train(system, model, [32, 64], base, price_per_accelerator_hour=2.0)
    assert res.evaluated == n
    assert res.feasible + sum(res.infeasible_by_reason.values()) == n
    assert res.infeasible_by_reason["memory"] > 0
    # The frontier is feasible and no feasible layout dominates any of its points.
    ok = np.flatnonzero(r.infeasible == 0)
    obj = np.stack([r.step_s, r.memory.total_bytes, s.cost], axis=1)
    for i in s.frontier:
        assert r.infeasible[i] == 0
        better = np.all(obj[ok] <= obj[i], axis=1) & np.any(obj[ok] < obj[i], axis=1)
        assert not better.any()
    # The fastest feasible step time is on it (of equal layouts, one is kept).
    assert float(np.min(r.step_s[ok])) == float(np.min(r.step_s[s.frontier]))
    # Vectorised == scalar on sampled points, feasible or not.
    rng = np.random.default_rng(3)
    for i in rng.choice(n, 25, replace=False):
        one = train(system, model, layout_execution(s.layouts, int(i)))
        assert one.step_s == float(r.step_s[i])
        assert one.memory.total_bytes == float(r.memory.total_bytes[i])
        assert one.feasible == (r.infeasible[i] == 0)


def test_infer_sweep_scalar_agreement_and_speculation() -> None:
    system, model = load_system("dgx-h100"), load_model("llama3-70b")
    req = Request(1000, 1000)
    spec = Speculation(acceptance_rate=0.7, cost_ratio=0.05)
    space = InferSpace(concurrency=(1, 8, 64, 0), draft_tokens=(0, 2, 4))
    s = sweep_infer_arrays(system, model, [8], req, Serving(), spec, 3.0, space)
    lay, r = s.layouts, s.serving
    assert len(lay) == 4 * 3 * 10  # (tp, pp) with tp * pp | 8: 10 pairs
    rng = np.random.default_rng(5)
    for i in rng.choice(len(lay), 20, replace=False):
        one = infer(system, model, req, Serving(), tp=int(lay.tensor_parallel[i]),
                    pp=int(lay.pipeline_parallel[i]), concurrency=int(lay.concurrency[i]),
                    draft_tokens=int(lay.draft_tokens[i]), speculation=spec)
        assert one.output_tokens_per_s == float(r.output_tokens_per_s[i])
        assert one.feasible == (r.infeasible[i] == 0)
    res = sweep_infer(system, model, [8], req, Serving(), spec, 3.0, space)
    # Speculation wins at low concurrency (latency end of the frontier): the frontier's
    # fastest-per-user point drafts tokens.
    fastest = max(res.frontier, key=lambda f: float(f["tokens_per_s_per_user"]))  # type: ignore[arg-type]
    assert fastest["draft_tokens"] != 0
    assert "cost_per_million_tokens_usd" in res.objectives


def test_train_sweep_agrees_with_scalar_on_unfused_attention_rates() -> None:
    # The A100 preset times unfused attention products by head dimension; the sweep
    # (micro-batch, tensor parallel: the batch of products) must time them as train() does.
    system, model = load_system("dgx-a100-80gb"), load_model("megatron-22b")
    base = load_execution("korthikanti-175b-seqsel")
    s = sweep_train_arrays(system, model, [8, 16], base, price_per_accelerator_hour=2.0)
    rng = np.random.default_rng(5)
    for i in rng.choice(len(s.layouts), 25, replace=False):
        one = train(system, model, layout_execution(s.layouts, int(i)))
        assert one.step_s == float(s.step.step_s[i])
