"""The layout sweep: every valid layout of a model on N accelerators, its infeasible
counts by reason, and the multi-objective (Pareto) frontier.

Training: every factorisation ``N = tp * pp * cp * dp`` (tensor parallel up to the
node's accelerators, as Megatron keeps it inside the scale-up domain), interleaved chunks
(1 without pipelining), expert parallel (MoE only; it splits ``dp * cp``), sequence
parallelism (with ``tp > 1``), micro-batch, recomputation and ZeRO stage, all evaluated
in one numpy pass by :func:`netio.model.training.evaluate`. Objectives, all minimised:
step time, memory per accelerator and cost per step (accelerator-seconds, or money at a
price per accelerator-hour).

Inference: every ``tp * pp`` replica size dividing N (the rest are data-parallel
replicas), expert parallel within TP (MoE), concurrency (powers of two up to the KV
cache's limit, and the limit itself), and speculative draft lengths when an acceptance
rate is given, evaluated in one pass by :func:`netio.model.inference.serve`. Objectives:
system output tokens/s (max), tokens/s per user (max, i.e. latency), memory per
accelerator (min), cost per million output tokens (min).

The frontier is the set of feasible layouts that no other feasible layout beats or ties
on every objective while beating on one. It is found by sorting on the first objective
and scanning blocks against the frontier so far (a point sorted later can never dominate
an earlier one), all numpy.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from netio.model.inference import (
    INFER_REASONS,
    ITERATION_TERMS,
    InferInfeasible,
    InferLayouts,
    Request,
    Serving,
    ServingArrays,
    Speculation,
    serve,
)
from netio.model.layout import IntArray, Layouts
from netio.model.schema import Attention, Execution, FloatArray, Model, Recompute, System
from netio.model.training import BREAKDOWN_TERMS, Infeasible, StepArrays, evaluate

TRAIN_REASONS = {
    Infeasible.MEMORY: "memory",
    Infeasible.BATCH_NOT_DIVISIBLE: "global batch not divisible by dp x micro-batch",
    Infeasible.TOO_FEW_LAYERS: "fewer layers than pipeline chunks",
    Infeasible.HEADS_NOT_DIVISIBLE: "heads not divisible by tp",
    Infeasible.EXPERTS_NOT_DIVISIBLE: "experts not divisible by ep",
    Infeasible.SEQUENCE_NOT_DIVISIBLE: "sequence not divisible by cp",
}


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def pareto_front(objectives: FloatArray, block: int = 512) -> IntArray:
    """Indices of the non-dominated rows of ``objectives`` (n x k, all minimised), in
    order of the first objective; of several equal rows only the first is kept."""
    n = objectives.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(objectives.T[::-1])
    pts = objectives[order]
    front_idx: list[IntArray] = []
    front = np.zeros((0, objectives.shape[1]))
    for start in range(0, n, block):
        chunk = pts[start:start + block]
        # Dominated by (or equal to) a frontier point found earlier: every point sorted
        # before this one is <= on the first objective, so "all <=" is enough.
        alive = ~np.any(np.all(front[None, :, :] <= chunk[:, None, :], axis=2), axis=1)
        cand = chunk[alive]
        # Within the block, an earlier point may dominate (or equal) a later one.
        le = np.all(cand[:, None, :] <= cand[None, :, :], axis=2)
        dom = np.any(np.triu(le, k=1), axis=0)
        keep = np.flatnonzero(alive)[~dom] + start
        front_idx.append(keep)
        front = np.concatenate([front, pts[keep]])
    return np.asarray(order[np.concatenate(front_idx)], dtype=np.int64)


# --- training ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrainSpace:
    """The choices the training sweep enumerates besides the factorisation of N."""

    micro_batch_sizes: tuple[int, ...] = (1, 2, 4, 8)
    interleaves: tuple[int, ...] = (1, 2, 4)
    recomputes: tuple[Recompute, ...] = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    context_parallel: tuple[int, ...] = (1, 2, 4, 8)
    expert_parallel: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)


def training_layouts(system: System, model: Model, accelerators: list[int], base: Execution,
                     space: TrainSpace | None = None) -> Layouts:
    """Every structurally valid training layout on each accelerator count."""
    sp_ = space or TrainSpace()
    rows: list[tuple[int, int, int, int, int, int, int, int, int, int]] = []
    eps = sp_.expert_parallel if model.moe is not None else (1,)
    g = system.node.accelerators
    for n in accelerators:
        for tp in divisors(n):
            if tp > g:
                continue
            for pp in divisors(n // tp):
                for cp in sp_.context_parallel:
                    if (n // tp // pp) % cp:
                        continue
                    dp = n // tp // pp // cp
                    for v in (sp_.interleaves if pp > 1 else (1,)):
                        for ep in eps:
                            if ep > dp * cp:
                                continue
                            for sq in ((0, 1) if tp > 1 else (0,)):
                                rows.extend((tp, pp, v, dp, ep, cp, sq, mb, int(rc), z)
                                            for mb, rc, z in itertools.product(
                                                sp_.micro_batch_sizes, sp_.recomputes,
                                                sp_.zero_stages))
    a = np.asarray(rows, dtype=np.int64).reshape(-1, 10)
    n_rows = a.shape[0]

    def full(v: int | bool) -> npt.NDArray[np.int64]:
        return np.full(n_rows, int(v), dtype=np.int64)

    return Layouts(
        tensor_parallel=a[:, 0], pipeline_parallel=a[:, 1], interleave=a[:, 2],
        data_parallel=a[:, 3], expert_parallel=a[:, 4], context_parallel=a[:, 5],
        sequence_parallel=a[:, 6].astype(np.bool_), zero_stage=a[:, 9],
        micro_batch_size=a[:, 7], global_batch_size=full(base.global_batch_size),
        recompute=a[:, 8], attention=full(int(base.attention)),
        overlap_grad_reduce=full(base.overlap_grad_reduce).astype(np.bool_),
        overlap_tp_comm=full(base.overlap_tp_comm).astype(np.bool_),
        compute_dtype=base.compute_dtype, grad_reduce_dtype=base.grad_reduce_dtype,
        async_tp_grad_comm=full(base.async_tp_grad_comm).astype(np.bool_),
        grad_accumulation_fusion=full(base.grad_accumulation_fusion).astype(np.bool_))


def layout_execution(lay: Layouts, i: int) -> Execution:
    """The Execution of element ``i`` of ``lay`` (for the single-layout model)."""
    return Execution(
        tensor_parallel=int(lay.tensor_parallel[i]),
        pipeline_parallel=int(lay.pipeline_parallel[i]), interleave=int(lay.interleave[i]),
        data_parallel=int(lay.data_parallel[i]), expert_parallel=int(lay.expert_parallel[i]),
        context_parallel=int(lay.context_parallel[i]),
        sequence_parallel=bool(lay.sequence_parallel[i]), zero_stage=int(lay.zero_stage[i]),
        micro_batch_size=int(lay.micro_batch_size[i]),
        global_batch_size=int(lay.global_batch_size[i]),
        recompute=Recompute(int(lay.recompute[i])), attention=Attention(int(lay.attention[i])),
        compute_dtype=lay.compute_dtype, grad_reduce_dtype=lay.grad_reduce_dtype,
        overlap_grad_reduce=bool(lay.overlap_grad_reduce[i]),
        overlap_tp_comm=bool(lay.overlap_tp_comm[i]),
        async_tp_grad_comm=bool(lay.async_tp_grad_comm[i]),
        grad_accumulation_fusion=bool(lay.grad_accumulation_fusion[i]))


@dataclass(frozen=True, slots=True)
class SweepResult:
    """Counts, the frontier and what it took; ``kind`` is ``train`` or ``infer``."""

    kind: str
    model: str
    system: str
    accelerators: tuple[int, ...]
    evaluated: int
    feasible: int
    infeasible_by_reason: dict[str, int]
    objectives: tuple[str, ...]
    frontier: tuple[dict[str, object], ...]

    def to_json_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "model": self.model, "system": self.system,
                "accelerators": list(self.accelerators), "evaluated_layouts": self.evaluated,
                "feasible_layouts": self.feasible,
                "infeasible_layouts_by_reason": dict(self.infeasible_by_reason),
                "objectives": list(self.objectives), "frontier": [dict(f) for f in
                                                                  self.frontier]}

    def to_text(self) -> str:
        lines = [f"{self.kind} sweep: {self.model} on {self.system}, accelerators "
                 f"{', '.join(map(str, self.accelerators))}",
                 f"{self.evaluated:,} layouts evaluated, {self.feasible:,} feasible"]
        for k, v in sorted(self.infeasible_by_reason.items(), key=lambda kv: -kv[1]):
            lines.append(f"  infeasible, {k}: {v:,}")
        lines.append(f"Pareto frontier ({len(self.frontier)} layouts) over "
                     f"{', '.join(self.objectives)}:")
        if self.frontier:
            keys = [k for k in self.frontier[0] if k not in ("breakdown_s",)]
            widths = [max(len(k), 9) for k in keys]
            lines.append(" ".join(f"{k:>{w}}" for k, w in zip(keys, widths, strict=True)))
            for f in self.frontier:
                lines.append(" ".join(_cell(f[k], w) for k, w in zip(keys, widths,
                                                                     strict=True)))
        return "\n".join(lines)


def _cell(v: object, width: int) -> str:
    if isinstance(v, float):
        return f"{v:>{width}.4g}"
    return f"{v!s:>{width}}"


def _counts(codes: IntArray, names: dict[Infeasible, str] | dict[InferInfeasible, str]
            ) -> dict[str, int]:
    out: dict[str, int] = {}
    values, counts = np.unique(codes[codes != 0], return_counts=True)
    for v, c in zip(values, counts, strict=True):
        label = {int(k): n for k, n in names.items()}[int(v)]
        out[label] = int(c)
    return out


@dataclass(frozen=True, slots=True)
class TrainSweep:
    layouts: Layouts
    step: StepArrays
    cost: FloatArray
    frontier: IntArray


def sweep_train_arrays(system: System, model: Model, accelerators: list[int],
                       base: Execution, price_per_accelerator_hour: float = 0.0,
                       space: TrainSpace | None = None) -> TrainSweep:
    """Evaluate every layout and find the frontier (arrays; see :func:`sweep_train`)."""
    lay = training_layouts(system, model, accelerators, base, space)
    r = evaluate(system, model, lay)
    acc = lay.accelerators.astype(np.float64)
    cost = r.step_s * acc * (price_per_accelerator_hour / 3600.0
                             if price_per_accelerator_hour > 0 else 1.0)
    ok = np.flatnonzero(r.infeasible == 0)
    obj = np.stack([r.step_s[ok], r.memory.total_bytes[ok], cost[ok]], axis=1)
    front = ok[pareto_front(obj)]
    return TrainSweep(lay, r, cost, front)


def sweep_train(system: System, model: Model, accelerators: list[int], base: Execution,
                price_per_accelerator_hour: float = 0.0,
                space: TrainSpace | None = None) -> SweepResult:
    """Every training layout of ``model`` on each count in ``accelerators``: counts by
    reason and the frontier over step time, memory per accelerator and cost per step."""
    s = sweep_train_arrays(system, model, accelerators, base, price_per_accelerator_hour,
                           space)
    lay, r = s.layouts, s.step
    money = price_per_accelerator_hour > 0
    rows = []
    for i in s.frontier:
        i = int(i)
        rows.append({
            "accelerators": int(lay.accelerators[i]), "tp": int(lay.tensor_parallel[i]),
            "pp": int(lay.pipeline_parallel[i]), "interleave": int(lay.interleave[i]),
            "dp": int(lay.data_parallel[i]), "ep": int(lay.expert_parallel[i]),
            "cp": int(lay.context_parallel[i]), "sp": bool(lay.sequence_parallel[i]),
            "micro_batch": int(lay.micro_batch_size[i]),
            "recompute": Recompute(int(lay.recompute[i])).name.lower(),
            "zero": int(lay.zero_stage[i]), "step_s": float(r.step_s[i]),
            "memory_per_accelerator_bytes": float(r.memory.total_bytes[i]),
            ("cost_per_step_usd" if money else "cost_per_step_accelerator_s"):
                float(s.cost[i]),
            "mfu_ratio": float(r.mfu[i]),
            "breakdown_s": {t: float(getattr(r, _STEP_FIELD[t])[i]) for t in BREAKDOWN_TERMS},
        })
    return SweepResult(
        "train", model.name, system.name, tuple(accelerators), len(lay),
        int(np.count_nonzero(r.infeasible == 0)), _counts(r.infeasible, TRAIN_REASONS),
        ("step_s", "memory_per_accelerator_bytes",
         "cost_per_step_usd" if money else "cost_per_step_accelerator_s"), tuple(rows))


_STEP_FIELD = {"compute": "compute_s", "memory_bound": "memory_bound_s",
               "tp_communication": "tp_comm_s", "cp_communication": "cp_comm_s",
               "ep_communication": "ep_comm_s", "pp_communication": "pp_comm_s",
               "dp_communication": "dp_comm_s", "bubble": "bubble_s"}


# --- inference -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InferSpace:
    concurrency: tuple[int, ...] = (*(2 ** k for k in range(13)), 0)  # 0: as many as fit
    draft_tokens: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6, 7, 8)


def inference_layouts(system: System, model: Model, accelerators: list[int],
                      speculate: bool, space: InferSpace | None = None
                      ) -> tuple[InferLayouts, IntArray]:
    """Every serving layout, and the accelerator count of the sweep each belongs to."""
    sp_ = space or InferSpace()
    rows: list[tuple[int, int, int, int, int, int]] = []
    drafts = sp_.draft_tokens if speculate else (0,)
    for n in accelerators:
        for tp in divisors(n):
            for pp in divisors(n // tp):
                eps = divisors(tp) if model.moe is not None else [1]
                rows.extend((tp, pp, ep, c, g, n) for ep, c, g in itertools.product(
                    eps, sp_.concurrency, drafts))
    a = np.asarray(rows, dtype=np.int64).reshape(-1, 6)
    return InferLayouts(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4]), a[:, 5]


@dataclass(frozen=True, slots=True)
class InferSweep:
    layouts: InferLayouts
    total_accelerators: IntArray
    serving: ServingArrays
    system_tokens_per_s: FloatArray
    cost_per_million_tokens: FloatArray
    frontier: IntArray


def sweep_infer_arrays(system: System, model: Model, accelerators: list[int],
                       request: Request, serving: Serving | None = None,
                       speculation: Speculation | None = None,
                       price_per_accelerator_hour: float = 0.0,
                       space: InferSpace | None = None) -> InferSweep:
    sv = serving or Serving()
    lay, total = inference_layouts(system, model, accelerators, speculation is not None,
                                   space)
    r = serve(system, model, sv, request, lay, speculation)
    replicas = total / lay.accelerators
    sys_tps = r.output_tokens_per_s * replicas
    rate = price_per_accelerator_hour / 3600.0 if price_per_accelerator_hour > 0 else 1.0
    cost = total * rate / sys_tps * 1e6
    mem = r.weights_bytes + r.kv_cache_bytes
    ok = np.flatnonzero(r.infeasible == 0)
    obj = np.stack([-sys_tps[ok], -r.output_tokens_per_s_per_user[ok], mem[ok], cost[ok]],
                   axis=1)
    front = ok[pareto_front(obj)]
    return InferSweep(lay, total, r, sys_tps, cost, front)


def sweep_infer(system: System, model: Model, accelerators: list[int], request: Request,
                serving: Serving | None = None, speculation: Speculation | None = None,
                price_per_accelerator_hour: float = 0.0,
                space: InferSpace | None = None) -> SweepResult:
    """Every serving layout: counts by reason and the frontier over system tokens/s,
    tokens/s per user, memory per accelerator and cost per million output tokens."""
    s = sweep_infer_arrays(system, model, accelerators, request, serving, speculation,
                           price_per_accelerator_hour, space)
    lay, r = s.layouts, s.serving
    money = price_per_accelerator_hour > 0
    ckey = ("cost_per_million_tokens_usd" if money
            else "cost_per_million_tokens_accelerator_s")
    rows = []
    for i in s.frontier:
        i = int(i)
        rows.append({
            "accelerators": int(s.total_accelerators[i]), "tp": int(lay.tensor_parallel[i]),
            "pp": int(lay.pipeline_parallel[i]), "ep": int(lay.expert_parallel[i]),
            "replicas": int(s.total_accelerators[i] // lay.accelerators[i]),
            "concurrency": float(r.concurrency[i]), "draft_tokens": int(lay.draft_tokens[i]),
            "system_tokens_per_s": float(s.system_tokens_per_s[i]),
            "tokens_per_s_per_user": float(r.output_tokens_per_s_per_user[i]),
            "memory_per_accelerator_bytes": float(r.weights_bytes[i] + r.kv_cache_bytes[i]),
            ckey: float(s.cost_per_million_tokens[i]),
            "breakdown_s": {t: float(getattr(r.stage, t)[i]) for t in ITERATION_TERMS}
            | {"draft_s": float(r.draft_s[i])},
        })
    return SweepResult(
        "infer", model.name, system.name, tuple(accelerators), len(lay),
        int(np.count_nonzero(r.infeasible == 0)), _counts(r.infeasible, INFER_REASONS),
        ("system_tokens_per_s (max)", "tokens_per_s_per_user (max)",
         "memory_per_accelerator_bytes", ckey), tuple(rows))


def with_global_batch(base: Execution, global_batch_size: int) -> Execution:
    return replace(base, global_batch_size=global_batch_size)
