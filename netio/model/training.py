"""Training step time, vectorised over layouts, and its explanation.

Per layer and micro-batch, each operation of a Megatron GPT layer is timed by the
roofline: ``max(flops / (peak * matmul_efficiency(flops)), bytes / (bandwidth *
memory_efficiency(bytes)))``, with the achieved-efficiency curves of the system file
(operation sizes are per rank: tensor parallelism splits the GEMMs). Forward:

* GEMMs: QKV ``2 T h (h + 2 g d) / t``, the two attention products ``2 b (a/t) s_r s d``
  each, the output projection ``2 T h^2 / t``, FC1 ``2 T h f k / t`` (``k`` = 2 when
  gated), FC2 ``2 T f h / t``; ``T = b s_r`` tokens, ``s_r = s / cp``, ``g`` KV heads,
  ``d`` head size. The attention products are a batch of ``b a / t`` small products:
  where the system gives their measured efficiency by head size
  (``attention_score_efficiency_by_head_dim``, ``..._over_value_...``) each runs at most
  at it, otherwise at the matmul curve of the batch's FLOPs. FlashAttention fuses the
  attention products and the softmax into one compute-bound kernel that skips the
  causal half.
* memory-bound operations, reading and writing the compute type: two layer norms, the
  softmax and dropout of the score matrix (unfused attention), two bias-dropout-adds,
  the activation function; sequence parallelism splits the non-tensor-parallel ones.
* backward: twice the GEMM time (data and weight gradients), 1.5x the memory traffic of
  the memory-bound operations (they read the saved input and the incoming gradient and
  write one gradient), 2.5x the forward time of a FlashAttention kernel; the unfused
  attention's backward is one product shaped as ``Q K^T`` and three as ``P V``.
* recomputation: full repeats the layer's forward (and its communication); selective
  repeats the attention core (scores, softmax, dropout, attention-times-values).

Communication, exposed unless said otherwise:

* tensor parallel: two all-reduces of the layer's ``T h`` activations forward and two
  backward, or with sequence parallelism two all-gathers and two reduce-scatters each
  way plus the two all-gathers redone in backward (Korthikanti et al. section 4.2.2);
  with ``overlap_tp_comm`` (sequence parallelism only) hidden behind the layer's GEMMs
  of the same direction where they are shorter: an upper bound on the gain, since the
  SMs the communication kernels occupy are not charged to the GEMMs. With
  ``async_tp_grad_comm`` (Megatron since late 2021) the backward collectives of the
  column-parallel GEMMs (QKV, FC1) run under those GEMMs' gradient GEMMs, each adding
  ``max(comm - gemm, COMM_SM_SHARE * comm)``: the SMs the collective holds are taken
  from the GEMM.
* weight-gradient accumulation over micro-batches: a separate pass (read the
  compute-type gradient, read and write the accumulator) or, with
  ``grad_accumulation_fusion``, in the gradient GEMM's epilogue, where it costs only
  what its traffic exceeds the GEMMs' compute.
* context parallel: the ring exchange of K and V, hidden behind the attention compute
  of the same step where it is shorter.
* expert parallel: an all-to-all to dispatch and one to combine the routed tokens,
  forward and backward.
* pipeline parallel: a send/recv of ``T h / t`` bytes per chunk boundary forward and
  backward (Megatron's scatter-gather), plus the all-gather over the tensor group when
  sequence parallelism is off.
* data parallel: the gradient all-reduce (ZeRO 0) or reduce-scatter plus the parameter
  all-gather (ZeRO 1-2) after the last micro-batch, hidden behind one micro-batch's
  backward when ``overlap_grad_reduce``; ZeRO 3 gathers the weights for every
  micro-batch's forward and backward, hidden behind the compute where it fits.

The pipeline runs ``m + (p - 1)/v`` stage-times of one micro-batch (1F1B, ``v``
interleaved chunks; the bubble is the ``(p-1)/v`` part), the slowest stage (the last,
which also computes the logits) setting the pace. The optimizer step is memory-bound:
Adam reads and writes fp32 weights, moments and gradients.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from netio.errors import ModelInputError
from netio.model.collectives import Algorithm, Collective, best_time, paths
from netio.model.gemm import efficiency as gemm_efficiency
from netio.model.layout import IntArray, Layouts, ranks_per_node
from netio.model.memory import (
    MemoryArrays,
    expert_params,
    layer_params,
    memory,
    microbatches,
    stage_layers,
)
from netio.model.schema import Attention, Execution, FloatArray, Model, Recompute, System

#: Backward traffic of a memory-bound operation relative to its forward traffic.
BACKWARD_MEMORY_FACTOR = 1.5
#: FlashAttention-2 backward work relative to its forward (5 GEMMs against 2).
FLASH_BACKWARD_FACTOR = 2.5
#: Adam step traffic per parameter: read fp32 weight, gradient, two moments; write
#: weight and moments (4 bytes each), plus the compute-type copy of the weight.
ADAM_BYTES_PER_PARAM = 7 * 4
#: Share of the SMs that a scale-up (NVLink) collective's kernels hold while they run,
#: taken from the GEMMs they overlap (NCCL runs one thread block per channel on an SM of
#: its own): calculon's A100 system description (systems/a100_80g.json, NVLink network
#: "processor_usage": 0.15), an estimate, not a measurement of these runs.
COMM_SM_SHARE = 0.15


class Infeasible(IntEnum):
    """Why a layout cannot run (0: it can)."""

    FEASIBLE = 0
    MEMORY = 1
    BATCH_NOT_DIVISIBLE = 2
    TOO_FEW_LAYERS = 3
    HEADS_NOT_DIVISIBLE = 4
    EXPERTS_NOT_DIVISIBLE = 5
    SEQUENCE_NOT_DIVISIBLE = 6


def _overlapped(comm_s: FloatArray, gemm_s: FloatArray) -> FloatArray:
    """What a collective on a second stream adds to the GEMM it runs under.

    While the collective runs its kernels hold ``COMM_SM_SHARE`` of the SMs, so the GEMM
    advances at ``1 - share`` of its speed: the pair takes ``max(comm, gemm + share *
    comm)``, i.e. it adds ``max(comm - gemm, share * comm)`` to the GEMM alone."""
    return np.asarray(np.maximum(comm_s - gemm_s, COMM_SM_SHARE * comm_s), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class _Op:
    flops: FloatArray
    bytes: FloatArray
    # One GEMM's output rows and columns and its inner dimension, where its shape is known
    # (a linear layer's); None: timed at the curve of its FLOPs alone.
    shape: tuple[FloatArray, FloatArray, FloatArray] | None = None


def _time(system: System, dtype: str, op: _Op, count: float | FloatArray = 1.0,
          ceiling: float | FloatArray = 1.0) -> FloatArray:
    """Roofline time of ``op`` as ``count`` equal GEMMs, at the matmul efficiency of one
    of them (by its shape where known, :func:`netio.model.gemm.efficiency`) and at most
    ``ceiling`` of peak."""
    acc = system.accelerator
    one = (gemm_efficiency(acc, *op.shape) if op.shape is not None
           else acc.matmul_efficiency.at(op.flops / np.maximum(count, 1.0)))
    eff = np.minimum(one, ceiling)
    compute = np.where(op.flops > 0, op.flops / (acc.peak(dtype) * eff), 0.0)
    mem = op.bytes / (acc.memory_bandwidth_bytes_per_s * acc.memory_efficiency.at(op.bytes))
    return np.asarray(np.maximum(compute, mem), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class StepArrays:
    """Every term of the step, one element per layout (seconds unless named)."""

    step_s: FloatArray
    compute_s: FloatArray  # GEMMs and other compute-bound work, recomputation included
    memory_bound_s: FloatArray  # memory-bound operations and the optimizer step
    recompute_s: FloatArray  # the part of compute_s + memory_bound_s that is recomputation
    tp_comm_s: FloatArray
    cp_comm_s: FloatArray
    ep_comm_s: FloatArray
    pp_comm_s: FloatArray
    dp_comm_s: FloatArray
    bubble_s: FloatArray
    model_flops: FloatArray  # per step, all accelerators, no recomputation
    hardware_flops: FloatArray  # per step, all accelerators, recomputation included
    mfu: FloatArray
    hfu: FloatArray
    memory: MemoryArrays
    infeasible: IntArray  # Infeasible values
    tp_algorithm: IntArray
    dp_algorithm: IntArray


def _layer_ops(system: System, model: Model, lay: Layouts) -> dict[str, FloatArray]:
    """Forward times of one layer's parts for one micro-batch on one rank."""
    dt = lay.compute_dtype
    el = float(lay.compute_bytes)
    t = lay.tensor_parallel.astype(np.float64)
    q = np.where(lay.sequence_parallel, t, 1.0)
    b = lay.micro_batch_size.astype(np.float64)
    s = float(model.sequence_length)
    sr = s / lay.context_parallel
    tok = b * sr
    h, a, d = float(model.hidden_size), float(model.attention_heads), float(model.head_dim)
    kvd = model.kv_heads * d
    gate = 2.0 if model.ffn_gated else 1.0
    drop = 1.0 if model.dropout else 0.0
    unfused = lay.attention == Attention.UNFUSED

    def gemm(m: FloatArray, k: float | FloatArray, n: float | FloatArray,
             batch: float | FloatArray = 1.0) -> _Op:
        return _Op(2.0 * m * k * n * batch, el * batch * (m * k + k * n + m * n))

    def linear(m: FloatArray, k: float | FloatArray, n: float | FloatArray,
               count: float | FloatArray = 1.0) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Forward, input-gradient and weight-gradient times of ``count`` layers ``y = x
        W`` (``x``: m x k, ``W``: k x n). The three have equal FLOPs and bytes but their
        outputs differ, m x n, m x k and k x n, and so does their tile quantization."""
        op = gemm(m, k, n, count)
        rows, inner, cols = (np.broadcast_to(np.asarray(v, dtype=np.float64), tok.shape)
                             for v in (m, k, n))
        return (_time(system, dt, _Op(op.flops, op.bytes, (rows, cols, inner)), count),
                _time(system, dt, _Op(op.flops, op.bytes, (rows, inner, cols)), count),
                _time(system, dt, _Op(op.flops, op.bytes, (inner, cols, rows)), count))

    def plus(a: tuple[FloatArray, ...], b: tuple[FloatArray, ...]
             ) -> tuple[FloatArray, FloatArray, FloatArray]:
        return a[0] + b[0], a[1] + b[1], a[2] + b[2]

    qkv = linear(tok, h, (h + 2 * kvd) / t)
    proj = linear(tok, h / t, h)
    heads = b * a / t
    scores_op = gemm(sr, d, s, heads)
    score_s, value_s = _attention_products(system, dt, scores_op, d)
    core_unfused = score_s + value_s
    # Backward of S = Q K^T and O = P V: dP = dO V^T has the scores' shape (inner
    # dimension d, s x s out); dV = P^T dO, dQ = dS K and dK = dS^T Q have P V's (inner
    # dimension s, one head wide out).
    core_unfused_bwd = score_s + 3 * value_s
    # FlashAttention: both products and the softmax in one kernel that skips the masked
    # (causal) half, at the kernel's own achieved efficiency; it reads Q, K, V and
    # writes O once.
    acc = system.accelerator
    flash_flops = 2 * scores_op.flops * 0.5
    flash_bytes = el * heads * (2 * sr * d + 2 * s * kvd / a)
    flash = np.maximum(flash_flops / (acc.peak(dt) * acc.fused_attention_efficiency),
                       flash_bytes / (acc.memory_bandwidth_bytes_per_s
                                      * acc.memory_efficiency.at(flash_bytes)))
    score_elems = heads * sr * s
    softmax = _time(system, dt, _Op(np.zeros_like(tok), 2 * el * score_elems))
    sdrop = _time(system, dt, _Op(np.zeros_like(tok), (2 * el + 1) * score_elems)) * drop
    attn_core = np.where(unfused, core_unfused, flash)
    attn_mem = np.where(unfused, softmax + sdrop, 0.0)
    if model.moe is None:
        fc1 = linear(tok, h, model.ffn_hidden_size * gate / t)
        fc2 = linear(tok, model.ffn_hidden_size / t, h)
        ffn_cols = float(model.ffn_hidden_size)
        zero3 = np.zeros_like(tok)
        router = (zero3, zero3, zero3)
    else:
        m = model.moe
        local = m.experts / lay.expert_parallel.astype(np.float64)
        routed = tok * m.top_k * m.capacity_factor
        per_expert = routed / local
        fe = float(m.expert_ffn_hidden_size)
        # the local experts' GEMMs one after another, each quantized on its own
        fc1 = linear(per_expert, h, fe * gate / t, local)
        fc2 = linear(per_expert, fe / t, h, local)
        if m.shared_experts:
            fc1 = plus(fc1, linear(tok, h, fe * m.shared_experts * gate / t))
            fc2 = plus(fc2, linear(tok, fe * m.shared_experts / t, h))
        ffn_cols = fe * (m.top_k * m.capacity_factor + m.shared_experts)
        router = linear(tok, h, float(m.experts))
    zero = np.zeros_like(tok)
    norms = 2 * _time(system, dt, _Op(zero, 2 * el * tok * h / q))
    bda = 2 * _time(system, dt, _Op(zero, (3 * el + drop) * tok * h / q))
    act = _time(system, dt, _Op(zero, el * tok * ffn_cols * (gate + 1) / t))
    # qkv and fc1 are the column-parallel GEMMs whose backward carries the tensor-parallel
    # collectives that the async path hides under their two gradient GEMMs.
    attn_core_bwd = np.where(unfused, core_unfused_bwd, FLASH_BACKWARD_FACTOR * flash)
    lin = (qkv, proj, fc1, fc2, router)
    return {"gemm": sum((x[0] for x in lin), zero),
            "gemm_dgrad": sum((x[1] for x in lin), zero),
            "gemm_wgrad": sum((x[2] for x in lin), zero),
            "attn_core": attn_core, "attn_core_bwd": attn_core_bwd, "attn_mem": attn_mem,
            "mem": norms + bda + act, "qkv_dgrad": qkv[1], "qkv_wgrad": qkv[2],
            "fc1_dgrad": fc1[1], "fc1_wgrad": fc1[2]}


def _attention_products(system: System, dtype: str, scores_op: _Op,
                        head_dim: float) -> tuple[FloatArray, FloatArray]:
    """Forward times of the unfused attention's two batched products, ``Q K^T`` and
    ``P V`` (equal FLOPs and bytes: ``scores_op``).

    A batch of ``b a / t`` products of ``s x d x s`` is not one GEMM of the batch's FLOPs:
    with the head dimension as the inner (``Q K^T``) or output (``P V``) dimension each
    tile does little work per byte, and measured A100 rates are far below the curve
    (Anthony et al. 2024, see the dgx-a100-80gb preset). Where the system gives the
    measured rates by head dimension each product runs at most at its own, and never
    faster than the matmul curve of the batch's FLOPs allows; otherwise both run at that
    curve."""
    acc = system.accelerator
    if acc.attention_score_efficiency is None or acc.attention_over_value_efficiency is None:
        both = _time(system, dtype, scores_op)
        return both, both
    return (_time(system, dtype, scores_op, ceiling=acc.attention_score_efficiency.at(head_dim)),
            _time(system, dtype, scores_op,
                  ceiling=acc.attention_over_value_efficiency.at(head_dim)))


def _flops_per_token_layer(model: Model) -> float:
    """Forward FLOPs of one layer per token, attention over the full sequence (the
    convention of Narayanan et al. 2021 and Korthikanti et al. 2022)."""
    h, s = model.hidden_size, model.sequence_length
    kvd = model.kv_heads * model.head_dim
    gate = 2 if model.ffn_gated else 1
    attn = 2 * h * (h + 2 * kvd) + 4 * s * h + 2 * h * h
    if model.moe is None:
        mlp = 2 * h * model.ffn_hidden_size * (gate + 1)
    else:
        m = model.moe
        mlp = 2 * h * m.expert_ffn_hidden_size * (gate + 1) * (m.top_k + m.shared_experts) \
            + 2 * h * m.experts
    return float(attn + mlp)


def evaluate(system: System, model: Model, lay: Layouts) -> StepArrays:
    """The training step of every layout in ``lay``."""
    if system.weight_streaming is not None:
        raise ModelInputError("weight_streaming", "this system streams its weights; the "
                              "GPU-style step model does not apply to it", path=system.name)
    G = system.node.accelerators
    el = float(lay.compute_bytes)
    t = lay.tensor_parallel.astype(np.float64)
    p = lay.pipeline_parallel.astype(np.float64)
    v = lay.interleave.astype(np.float64)
    dp = lay.data_parallel.astype(np.float64)
    cp = lay.context_parallel.astype(np.float64)
    ep = lay.expert_parallel.astype(np.float64)
    sp = lay.sequence_parallel
    b = lay.micro_batch_size.astype(np.float64)
    tok = b * model.sequence_length / cp
    h = float(model.hidden_size)
    m = microbatches(lay)
    rc = lay.recompute
    ops = _layer_ops(system, model, lay)
    fwd_compute = ops["gemm"] + ops["attn_core"]
    fwd_mem = ops["mem"] + ops["attn_mem"]
    flash = lay.attention == Attention.FLASH
    gemm_bwd = ops["gemm_dgrad"] + ops["gemm_wgrad"]
    bwd_compute = gemm_bwd + ops["attn_core_bwd"]
    bwd_mem = BACKWARD_MEMORY_FACTOR * fwd_mem
    re_compute = np.where(rc == Recompute.FULL, fwd_compute,
                          np.where((rc == Recompute.SELECTIVE) & ~flash, ops["attn_core"], 0.0))
    re_mem = np.where(rc == Recompute.FULL, fwd_mem,
                      np.where(rc == Recompute.SELECTIVE, ops["attn_mem"], 0.0))

    # Tensor parallel: per layer, both directions.
    act_bytes = el * tok * h
    tp_paths = paths(system, t, ranks_per_node(t, 1, G))
    ar, tp_algo = best_time(Collective.ALL_REDUCE, act_bytes, tp_paths)
    ag, ag_algo = best_time(Collective.ALL_GATHER, act_bytes, tp_paths)
    tp_algo = np.where(sp, ag_algo, tp_algo)
    rs, _ = best_time(Collective.REDUCE_SCATTER, act_bytes, tp_paths)
    tp_fwd = np.where(sp, 2 * (ag + rs), 2 * ar)
    tp_bwd = np.where(sp, 2 * (ag + rs) + 2 * ag, 2 * ar)
    # async_tp_grad_comm (Megatron-LM's LinearWithGradAccumulationAndAsyncCommunication):
    # in the backward of each column-parallel GEMM (QKV, FC1) the input-gradient
    # all-reduce runs under the weight-gradient GEMM; with sequence parallelism the
    # re-gather of the input runs under the input-gradient GEMM and the reduce-scatter of
    # that gradient under the weight-gradient GEMM. The row-parallel backward collectives
    # (all-gathers of the output gradient with sequence parallelism) stay exposed.
    col = (("qkv_dgrad", "qkv_wgrad"), ("fc1_dgrad", "fc1_wgrad"))
    async_bwd = np.where(sp, 2 * ag + sum(_overlapped(ag, ops[dg]) + _overlapped(rs, ops[wg])
                                          for dg, wg in col),
                         sum(_overlapped(ar, ops[wg]) for _, wg in col))
    tp_bwd = np.where(lay.async_tp_grad_comm, async_bwd, tp_bwd)
    # With --tp-comm-overlap (sequence parallel only) the gathers and reduce-scatters run
    # in chunks under the GEMMs that consume and produce them: only the excess shows.
    hide = sp & lay.overlap_tp_comm
    tp_fwd = np.where(hide, np.maximum(tp_fwd - ops["gemm"], 0.0), tp_fwd)
    tp_bwd = np.where(hide, np.maximum(tp_bwd - gemm_bwd, 0.0), tp_bwd)
    tp_layer = tp_fwd + tp_bwd + np.where(rc == Recompute.FULL, tp_fwd, 0.0)

    # Context parallel: ring exchange of K and V, overlapped with the attention core.
    cp_paths = paths(system, cp, ranks_per_node(cp, t, G))
    kv_bytes = el * 2 * tok * model.kv_heads * model.head_dim / t
    hop, _ = best_time(Collective.SEND_RECV, kv_bytes, cp_paths)
    ring = (cp - 1) * hop
    cp_layer = (np.maximum(ring - ops["attn_core"], 0.0)
                + np.maximum(2 * ring - 2 * ops["attn_core"], 0.0))
    cp_layer = np.where(cp > 1, cp_layer, 0.0)

    # Expert parallel: dispatch and combine all-to-alls.
    if model.moe is not None:
        ep_paths = paths(system, ep, ranks_per_node(ep, t * cp, G))
        routed = el * tok * model.moe.top_k * model.moe.capacity_factor * h / np.where(sp, t, 1.0)
        a2a, _ = best_time(Collective.ALL_TO_ALL, routed, ep_paths)
        ep_layer = (2 * 2 + np.where(rc == Recompute.FULL, 2, 0)) * a2a
    else:
        ep_layer = np.zeros_like(t)

    layers = stage_layers(model, lay)
    # Weight gradients accumulate over the micro-batches: the backward pass reads the new
    # gradient and reads and writes the accumulator (Megatron's main_grad) once per
    # parameter and micro-batch.
    split, replicated = layer_params(model)
    layer_params_rank = split / t + replicated + expert_params(model) / (ep * t)
    accum_bytes = layer_params_rank * (el + 2 * float(lay.grad_bytes))
    accum = _time(system, lay.compute_dtype, _Op(np.zeros_like(t), accum_bytes))
    # grad_accumulation_fusion: the weight-gradient GEMM reads and writes the accumulator
    # in its epilogue (no compute-type gradient is written and read back); that traffic
    # costs time only where it exceeds the GEMMs' compute, as a roofline would have it.
    fused_bytes = layer_params_rank * 2 * float(lay.grad_bytes)
    fused = _time(system, lay.compute_dtype, _Op(np.zeros_like(t), fused_bytes))
    accum = np.where(lay.grad_accumulation_fusion, np.maximum(fused - ops["gemm_wgrad"], 0.0),
                     accum)
    per_layer_compute = fwd_compute + bwd_compute + re_compute
    per_layer_mem = fwd_mem + bwd_mem + re_mem + accum

    # The output layer (last stage): logits GEMM forward and backward, fp32 softmax
    # cross-entropy read and written.
    vt = model.vocab_size / t
    logits_op = _Op(2 * tok * h * vt, el * (tok * h + h * vt + tok * vt))
    # forward (tokens x vocab/t), input gradient (tokens x h), weight gradient (h x vocab/t)
    hh = np.full_like(tok, h)
    logits = sum((_time(system, lay.compute_dtype, _Op(logits_op.flops, logits_op.bytes, shape))
                  for shape in ((tok, vt, hh), (tok, hh, vt), (hh, vt, tok))), np.zeros_like(tok))
    xent = 3 * _time(system, lay.compute_dtype,
                     _Op(np.zeros_like(t), 2 * 4.0 * tok * model.vocab_size / t))

    # Pipeline send/recv per chunk boundary, forward and backward.
    pp_paths = paths(system, np.full_like(p, 2.0), ranks_per_node(2, t * cp * dp, G))
    p2p, _ = best_time(Collective.SEND_RECV, act_bytes / t, pp_paths)
    gather, _ = best_time(Collective.ALL_GATHER, act_bytes, tp_paths)
    p2p = p2p + np.where(sp, 0.0, gather)
    pp_mb = np.where(p > 1, 2 * v * p2p, 0.0)

    stage_compute = layers * per_layer_compute + logits
    stage_mem = layers * per_layer_mem + xent
    stage_tp = layers * tp_layer
    stage_cp = layers * cp_layer
    stage_ep = layers * ep_layer
    stage = stage_compute + stage_mem + stage_tp + stage_cp + stage_ep + pp_mb
    bubble_mb = (p - 1) / v
    pipe = (m + bubble_mb) * stage

    # Data parallel gradient reduction (and ZeRO's parameter gathers).
    mem = memory(model, lay)
    params = mem.params_per_rank
    dpg = dp * cp
    dp_paths = paths(system, dpg, ranks_per_node(dpg, t, G))
    grad_bytes = params * float(lay.grad_bytes)
    ar_dp, dp_algo = best_time(Collective.ALL_REDUCE, grad_bytes, dp_paths)
    rs_dp, rs_algo = best_time(Collective.REDUCE_SCATTER, grad_bytes, dp_paths)
    ag_dp, _ = best_time(Collective.ALL_GATHER, params * el, dp_paths)
    z = lay.zero_stage
    dp_comm = np.where(z == 0, ar_dp, rs_dp + ag_dp)
    dp_algo = np.where(z == 0, dp_algo, rs_algo)
    window = np.where(lay.overlap_grad_reduce,
                      layers * (bwd_compute + bwd_mem + tp_bwd), 0.0)
    dp_exposed = np.maximum(dp_comm - window, 0.0)
    zero3 = m * (2 * ag_dp + rs_dp)
    dp_exposed = np.where(z >= 3, np.maximum(zero3 - pipe, 0.0), dp_exposed)
    dp_exposed = np.where(dpg > 1, dp_exposed, 0.0)

    acc = system.accelerator
    opt_params = params / np.where(z >= 1, dpg, 1.0)
    opt_bytes = opt_params * (ADAM_BYTES_PER_PARAM + el)
    optimizer = opt_bytes / (acc.memory_bandwidth_bytes_per_s * acc.memory_efficiency.at(opt_bytes))

    step = pipe + dp_exposed + optimizer
    n_acc = lay.accelerators.astype(np.float64)
    tokens_step = lay.global_batch_size.astype(np.float64) * model.sequence_length
    fwd_flops = tokens_step * (model.layers * _flops_per_token_layer(model)
                               + 2 * h * model.vocab_size)
    model_flops = 3 * fwd_flops
    layer_fwd = tokens_step * model.layers * _flops_per_token_layer(model)
    attn_core_fwd = tokens_step * model.layers * 4 * model.sequence_length * h
    re_flops = np.where(rc == Recompute.FULL, layer_fwd,
                        np.where((rc == Recompute.SELECTIVE) & ~flash, attn_core_fwd, 0.0))
    hardware_flops = model_flops + re_flops
    peak = acc.peak(lay.compute_dtype)
    mfu = model_flops / (step * n_acc * peak)
    hfu = hardware_flops / (step * n_acc * peak)

    bubble = bubble_mb * stage
    infeasible = _feasibility(system, model, lay, mem, m)
    return StepArrays(
        step_s=step, compute_s=m * stage_compute,
        memory_bound_s=m * stage_mem + optimizer,
        recompute_s=m * layers * (re_compute + re_mem),
        tp_comm_s=m * stage_tp, cp_comm_s=m * stage_cp, ep_comm_s=m * stage_ep,
        pp_comm_s=m * pp_mb, dp_comm_s=dp_exposed, bubble_s=bubble,
        model_flops=model_flops, hardware_flops=hardware_flops, mfu=mfu, hfu=hfu,
        memory=mem, infeasible=infeasible, tp_algorithm=tp_algo, dp_algorithm=dp_algo)


def _feasibility(system: System, model: Model, lay: Layouts, mem: MemoryArrays,
                 m: FloatArray) -> IntArray:
    reason = np.zeros(len(lay), dtype=np.int64)
    checks = [
        (Infeasible.MEMORY, mem.total_bytes > system.accelerator.memory_bytes),
        (Infeasible.SEQUENCE_NOT_DIVISIBLE, model.sequence_length % lay.context_parallel != 0),
        (Infeasible.EXPERTS_NOT_DIVISIBLE,
         (lay.data_parallel * lay.context_parallel) % lay.expert_parallel != 0
         if model.moe is None else
         ((model.moe.experts % lay.expert_parallel != 0)
          | ((lay.data_parallel * lay.context_parallel) % lay.expert_parallel != 0))),
        (Infeasible.HEADS_NOT_DIVISIBLE, model.attention_heads % lay.tensor_parallel != 0),
        (Infeasible.TOO_FEW_LAYERS, lay.pipeline_parallel * lay.interleave > model.layers),
        (Infeasible.BATCH_NOT_DIVISIBLE,
         lay.global_batch_size % (lay.data_parallel * lay.micro_batch_size) != 0),
    ]
    for code, bad in checks:  # the last failing check wins: a layout that cannot be
        # built is reported as such before what it would need in memory
        reason = np.where(bad, int(code), reason)
    return reason


# --- one execution: the typed, explained result -------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryReport:
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    total_bytes: float
    capacity_bytes: float


@dataclass(frozen=True, slots=True)
class TrainResult:
    """One execution's step, explained term by term."""

    system: str
    model: str
    accelerators: int
    feasible: bool
    infeasible_reason: str
    step_s: float
    breakdown_s: dict[str, float]
    bottleneck: str
    mfu: float
    hfu: float
    model_flops_per_step: float
    tokens_per_s: float
    microbatches: float
    memory: MemoryReport
    recompute_s: float
    collectives: dict[str, str] = field(default_factory=dict)
    execution: Execution | None = None

    @property
    def layout(self) -> str:
        """``TP 8 x PP 8 (3 chunks) x DP 1`` and the options that shape the step."""
        ex = self.execution
        if ex is None:
            return ""
        parts = [f"TP {ex.tensor_parallel}", f"PP {ex.pipeline_parallel}"
                 + (f" ({ex.interleave} chunks)" if ex.interleave > 1 else ""),
                 f"DP {ex.data_parallel}"]
        parts += [f"{k} {v}" for k, v in (("CP", ex.context_parallel),
                                          ("EP", ex.expert_parallel)) if v > 1]
        opts = [f"micro-batch {ex.micro_batch_size}", f"batch {ex.global_batch_size}",
                f"recompute {ex.recompute.name.lower()}", f"ZeRO {ex.zero_stage}",
                f"{ex.attention.name.lower()} attention", ex.compute_dtype]
        if ex.sequence_parallel:
            opts.insert(0, "sequence parallel")
        # the pre-2022 software choices are named; the current defaults are not
        if not ex.async_tp_grad_comm:
            opts.append("synchronous TP backward")
        if not ex.grad_accumulation_fusion:
            opts.append("separate gradient accumulation")
        return " x ".join(parts) + "; " + ", ".join(opts)

    def to_json_dict(self) -> dict[str, object]:
        mem = self.memory
        return {
            "system": self.system, "model": self.model, "accelerators": self.accelerators,
            "feasible": self.feasible, "infeasible_reason": self.infeasible_reason or None,
            "step_s": self.step_s, "breakdown_s": dict(self.breakdown_s),
            "recompute_within_compute_and_memory_bound_s": self.recompute_s,
            "bottleneck": self.bottleneck, "mfu_ratio": self.mfu, "hfu_ratio": self.hfu,
            "model_flops_per_step": self.model_flops_per_step,
            "tokens_per_s": self.tokens_per_s, "microbatches_per_step": self.microbatches,
            "memory_per_accelerator_bytes": {
                "weights": mem.weights_bytes, "gradients": mem.gradients_bytes,
                "optimizer": mem.optimizer_bytes, "activations": mem.activations_bytes,
                "total": mem.total_bytes, "capacity": mem.capacity_bytes},
            "collective_algorithms": dict(self.collectives),
            "execution": None if self.execution is None else {
                f.name: (getattr(self.execution, f.name).name.lower()
                         if f.name in ("recompute", "attention")
                         else getattr(self.execution, f.name))
                for f in dataclasses.fields(self.execution)},
        }

    def to_text(self) -> str:
        gib = float(1 << 30)
        lines = [f"{self.model} on {self.accelerators} x {self.system}", self.layout,
                 f"step {self.step_s:.4g} s   MFU {self.mfu:.1%}   HFU {self.hfu:.1%}   "
                 f"{self.tokens_per_s:,.0f} tokens/s   {self.microbatches:g} micro-batches",
                 "" if self.feasible else f"INFEASIBLE: {self.infeasible_reason}",
                 f"{'term':<28}{'time[s]':>12}{'share':>9}"]
        for k, val in self.breakdown_s.items():
            lines.append(f"{k:<28}{val:>12.4g}{val / self.step_s:>9.1%}")
        share = self.breakdown_s[self.bottleneck] / self.step_s
        lines.append(f"bottleneck: {self.bottleneck} ({share:.1%} of the step)")
        mem = self.memory
        lines.append(f"memory per accelerator [GiB]: weights {mem.weights_bytes / gib:.2f}, "
                     f"gradients {mem.gradients_bytes / gib:.2f}, optimizer "
                     f"{mem.optimizer_bytes / gib:.2f}, activations "
                     f"{mem.activations_bytes / gib:.2f}, total {mem.total_bytes / gib:.2f} of "
                     f"{mem.capacity_bytes / gib:.2f}")
        if self.collectives:
            lines.append("collectives: " + ", ".join(f"{k} {v}" for k, v in
                                                     self.collectives.items()))
        return "\n".join(line for line in lines if line != "")


BREAKDOWN_TERMS = ("compute", "memory_bound", "tp_communication", "cp_communication",
                   "ep_communication", "pp_communication", "dp_communication", "bubble")


def _reason(code: int, mem: MemoryReport, model: Model, ex: Execution) -> str:
    gib = float(1 << 30)
    if code == Infeasible.MEMORY:
        terms = {"weights": mem.weights_bytes, "gradients": mem.gradients_bytes,
                 "optimizer state": mem.optimizer_bytes, "activations": mem.activations_bytes}
        big = max(terms, key=lambda k: terms[k])
        over = (mem.total_bytes - mem.capacity_bytes) / gib
        return (f"memory: needs {mem.total_bytes / gib:.2f} GiB per accelerator, has "
                f"{mem.capacity_bytes / gib:.2f} GiB ({over:.2f} GiB over); largest term "
                f"{big} {terms[big] / gib:.2f} GiB")
    texts = {
        Infeasible.BATCH_NOT_DIVISIBLE:
            f"global_batch_size {ex.global_batch_size} is not a multiple of data_parallel "
            f"{ex.data_parallel} x micro_batch_size {ex.micro_batch_size}",
        Infeasible.TOO_FEW_LAYERS:
            f"{model.layers} layers cannot fill pipeline_parallel {ex.pipeline_parallel} x "
            f"interleave {ex.interleave} chunks",
        Infeasible.HEADS_NOT_DIVISIBLE:
            f"{model.attention_heads} attention heads do not split over tensor_parallel "
            f"{ex.tensor_parallel}",
        Infeasible.EXPERTS_NOT_DIVISIBLE:
            f"expert_parallel {ex.expert_parallel} must divide the experts and "
            f"data_parallel x context_parallel",
        Infeasible.SEQUENCE_NOT_DIVISIBLE:
            f"sequence_length {model.sequence_length} does not split over context_parallel "
            f"{ex.context_parallel}",
    }
    return texts.get(Infeasible(code), "")


def train(system: System, model: Model, execution: Execution) -> TrainResult:
    """The step of one execution, with its breakdown, bottleneck, memory and feasibility."""
    lay = Layouts.from_execution(execution)
    r = evaluate(system, model, lay)

    def f(a: FloatArray) -> float:
        return float(a[0])

    breakdown = {"compute": f(r.compute_s), "memory_bound": f(r.memory_bound_s),
                 "tp_communication": f(r.tp_comm_s), "cp_communication": f(r.cp_comm_s),
                 "ep_communication": f(r.ep_comm_s), "pp_communication": f(r.pp_comm_s),
                 "dp_communication": f(r.dp_comm_s), "bubble": f(r.bubble_s)}
    named = {k: v for k, v in breakdown.items() if k != "bubble"}
    bottleneck = max(named, key=lambda k: named[k])
    if breakdown["bubble"] > named[bottleneck]:
        bottleneck = "bubble"
    mem = r.memory
    report = MemoryReport(f(mem.weights_bytes), f(mem.gradients_bytes), f(mem.optimizer_bytes),
                          f(mem.activations_bytes), f(mem.total_bytes),
                          system.accelerator.memory_bytes)
    code = int(r.infeasible[0])
    tp_what = ("all-gather + reduce-scatter" if execution.sequence_parallel else "all-reduce")
    dp_what = "reduce-scatter + all-gather" if execution.zero_stage else "all-reduce"
    collectives = {
        "tensor_parallel": f"{Algorithm(int(r.tp_algorithm[0])).name.lower()} {tp_what}"
        if execution.tensor_parallel > 1 else "none",
        "data_parallel_gradients": f"{Algorithm(int(r.dp_algorithm[0])).name.lower()} "
        f"{dp_what}" if execution.data_parallel * execution.context_parallel > 1 else "none"}
    tokens = execution.global_batch_size * model.sequence_length
    return TrainResult(
        system.name, model.name, execution.accelerators, code == 0,
        _reason(code, report, model, execution), f(r.step_s), breakdown, bottleneck,
        f(r.mfu), f(r.hfu), f(r.model_flops), tokens / f(r.step_s),
        float(microbatches(lay)[0]), report, f(r.recompute_s), collectives, execution)
