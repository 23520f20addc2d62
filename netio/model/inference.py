"""LLM inference by roofline: prefill, decode, continuous batching, speculation.

Everything is evaluated over numpy arrays of serving layouts (:class:`InferLayouts`:
tensor, pipeline and expert parallelism, concurrency, draft length), so the sweep and
the single-configuration answer are the same code (the single answer is arrays of one).

**One engine iteration** (in-flight batching, as TensorRT-LLM, vLLM and SGLang run it)
carries ``D`` decoding sequences, each contributing ``q`` tokens (1, or ``gamma + 1``
when a speculative draft is verified), and ``P`` prompt tokens being prefilled (chunked
prefill piggy-backs on the decode batch). Per pipeline stage of ``ceil(L / pp)``
layers, on one of its ``tp`` ranks, each operation is timed by the roofline
``max(flops / (peak * matmul_efficiency), bytes / (bandwidth * memory_efficiency))``
with the system's achieved-efficiency curves, and the times add up:

* GEMMs over ``m = D q + P`` tokens: QKV ``2 m h (h + 2 g d) / tp``, output projection
  ``2 m h^2 / tp``, FC1 ``2 m h f k / tp`` (``k`` = 2 when gated), FC2 ``2 m f h / tp``;
  bytes are the weights (read once per iteration, whatever ``m``; this is why decode is
  memory-bound at small batch and compute-bound at large batch) plus the activations in
  and out. A mixture of experts reads only the experts its tokens touch: with ``E``
  experts and top-``k`` routing, ``E (1 - (1 - k/E)^m)`` of them in expectation.
* attention: decode reads the KV cache of every sequence (``D c_d`` tokens of context,
  ``2 g_r d`` elements per token and layer, ``g_r = max(g / tp, 1)`` KV heads per rank)
  and does ``4 D q c_d a d / tp`` FLOPs; prefill does ``4 P c_p a d / tp`` FLOPs with a
  prompt token attending ``c_p`` = half its prompt on average (causal); fused, at most at
  FlashAttention-3's published forward rate for the prompt's length (:class:`Serving`);
  unfused, the prefill's products run at most at the system's measured rates by head
  dimension where it gives them (as in training).
* element-wise traffic that the engines do not fuse into GEMMs (residual-add + RMSNorm
  twice, rotary embedding + KV-cache write, SwiGLU), in the activation type.
* tensor parallel: two all-reduces of ``m h`` activations per layer (Megatron-style
  column/row split); expert parallel: an all-to-all to dispatch and one to combine the
  routed tokens; pipeline parallel: one send/recv of ``m h`` per stage boundary; all
  with :mod:`netio.model.collectives` on the system's links.
* the last stage adds the LM head, ``2 n_s h V / tp`` for the ``n_s`` positions whose
  logits are needed: one per sequence, every verified token of a speculative step.
* GEMM FLOPs are counted over whole tiles of rows (Hopper's warpgroup MMA is 64 rows
  high), and FP8 GEMMs reach 0.875 of the bf16 efficiency (NVIDIA's published FP8/BF16
  speed-up; :class:`Serving`).
* the host: the executor walks every request of the batch once per iteration while the
  GPU runs the previous one, so an iteration lasts ``max(gpu + exposed, host)``
  (``overhead_s`` is what the host adds; sources in :class:`Serving`).

**Serving at steady state** (the quantity ``trtllm-bench throughput`` and vLLM's
``benchmark_throughput`` report): ``B`` requests in flight, limited by the KV cache that
fits beside the weights. The capacity scheduler reserves ``isl + osl`` tokens of cache
per request (TensorRT-LLM's default ``GUARANTEED_NO_EVICT`` policy), so
``B = min(floor(kv_tokens / (isl + osl)), max_batch_size)``. In each iteration ``B/osl``
requests finish and as many start, so an iteration carries ``D = B`` decodes at mean
context ``isl + osl/2`` and ``P = B isl / osl`` prompt tokens, and produces ``B``
output tokens (trtllm-bench sizes ``max_num_tokens`` to exactly ``B (1 + isl/osl)`` for
this reason). With ``pp`` stages, ``pp`` micro-batches of ``B/pp`` are in flight. Output
tokens/s of the system are ``(B/pp) / T_stage``; time per output token is
``pp T_stage``. A published max-throughput run is not this steady state but a finite set
of identical requests, all waiting at the start, with a ramp, waves and a drain:
:mod:`netio.model.serving_run` simulates it iteration by iteration on :func:`iteration`.

**Speculative decoding** (Leviathan et al., "Fast Inference from Transformers via
Speculative Decoding", ICML 2023): with acceptance rate ``alpha`` and ``gamma`` drafted
tokens, one verification yields ``(1 - alpha^(gamma+1)) / (1 - alpha)`` tokens in
expectation (their Theorem 3.8); tree or multi-head drafts (EAGLE, Medusa) are given as
a mean accepted length instead. The cost of a step is ``gamma`` draft iterations (a draft
model on the same ranks, or ``c`` times a target decode iteration: the paper's cost
coefficient) plus one target iteration over ``gamma + 1`` tokens per sequence, or over
the tree's nodes and root for a tree draft (EAGLE: 5 draft passes, 26 tokens verified). Unlike
the paper's speed-up formula, which assumes verification costs one decode step, the
verification here is timed by the roofline: at batch 1 it reads the weights once and is
as cheap as one decode step; as the batch grows it becomes compute-bound and costs up to
``gamma + 1`` decode steps, so the speed-up shrinks and eventually turns into a slow-down.

**Disaggregated prefill/decode**: the prompt's KV cache (``isl`` tokens, all layers) is
sent from the prefill worker to the decode worker over the scale-out network, each rank
its shard, timed as a send/recv on the system's NIC (or its fabric profile).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from netio.errors import ModelInputError
from netio.model.collectives import Collective, best_time, paths
from netio.model.layout import IntArray, ranks_per_node
from netio.model.memory import expert_params, layer_params
from netio.model.schema import DTYPE_BYTES, Curve, FloatArray, Model, System

GiB = float(1 << 30)


@dataclass(frozen=True, slots=True)
class Serving:
    """The serving engine's settings and the efficiency knobs of the inference model.

    Every default is named and sourced; none is fitted to a published throughput. The
    kernel and host figures (FP8/BF16 ratio, 64-row tile, host time per request) are
    Hopper's and TensorRT-LLM's PyTorch executor's: for another accelerator or engine,
    pass its own (``gemm_row_tile=1``, ``host_per_request_s=0`` turn the terms off).
    """

    weight_dtype: str = "fp8"
    kv_dtype: str = "fp8"
    #: Activations between kernels, the LM head and attention math. ModelOpt FP8
    #: checkpoints keep the LM head and the activations between kernels in bf16
    #: (nvidia/Llama-3.1-8B-Instruct-FP8 hf_quant_config.json: quant_algo FP8,
    #: kv_cache_quant_algo FP8, lm_head excluded from quantization).
    activation_dtype: str = "bf16"
    #: Fraction of the memory left after weights and runtime that becomes KV cache:
    #: TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction`` default 0.90
    #: (docs/source/performance/perf-overview.md, "Running the Benchmark").
    kv_cache_memory_fraction: float = 0.90
    #: Largest in-flight batch: trtllm-bench caps it at 4096 to bound decoder buffers
    #: (tensorrt_llm/bench/build/tuning.py, finetune_setting).
    max_batch_size: int = 4096
    #: Memory the runtime keeps besides weights and KV cache (CUDA context, cuBLAS
    #: workspace, allocator slack): ~1 GiB. Assumed; the activation workspace of one
    #: iteration is added to it from the model's shape.
    runtime_reserve_bytes: float = GiB
    #: Achieved GEMM efficiency of a data type relative to the system's matmul curve
    #: (measured in bf16). Source: NVIDIA's cuBLAS 12.9 release post ("Boosting Matrix
    #: Multiplication Speed and Flexibility with NVIDIA cuBLAS 12.9", developer.nvidia.com
    #: blog, 2025): on Hopper, FP8 matmuls (channel- and block-scaled) run 1.75x as fast as
    #: the BF16 baseline for large matmuls and at least 1.25x for most other shapes. At
    #: twice the peak, 1.75x is 0.875 of the bf16 efficiency: the plateau value, taken as
    #: it is (the smaller shapes are already slower through the curve itself; their 1.25x
    #: floor is a lower bound, not a size-indexed curve). Consistent with a public cuBLASLt
    #: check at 8192^3 (~1,610 FP8 TFLOPS, 0.81 of peak, against the bf16 MAMF 0.80) and
    #: DeepGEMM's best 0.78 of peak on H800. Not fitted to any throughput row.
    matmul_efficiency_ratio_by_dtype: Mapping[str, float] = field(
        default_factory=lambda: {"fp8": 0.875})
    #: Rows (tokens) a GEMM kernel computes at a time: Hopper's warpgroup MMA
    #: (``wgmma.mma_async``, PTX ISA 8.0, "Warpgroup MMA" shapes m64nNk16 / m64nNk32) has
    #: M = 64 for every type, so a GEMM over ``m`` tokens does the work of
    #: ``ceil(m / 64) * 64``. Below 64 tokens kernels swap the operands (the weight takes
    #: the M side, tokens the N side, which steps by 8: FlashInfer's
    #: ``fp8_blockscale_gemm_sm90`` documents the swap for M < 32), so small batches pad
    #: to a multiple of ``gemm_swap_tile_rows``. 1 turns it off.
    gemm_row_tile: int = 64
    gemm_swap_tile_rows: int = 8
    #: Host work of one iteration (scheduling, input preparation, sampler bookkeeping,
    #: one Python pass per request in the batch). TensorRT-LLM's PyTorch executor overlaps
    #: it with the previous iteration's GPU work (one step of lookahead), so an iteration
    #: lasts ``max(gpu + iteration_overhead_s, host_per_request_s * requests)``.
    #: ``host_per_request_s``: 45.11 ms of host time per iteration for 1,536 requests per
    #: rank (GPT-OSS-120B, GB200, attention-DP 2, max_batch_size 1536, "host overhead is
    #: the bottleneck"; NVIDIA/TensorRT-LLM pull request 10273), 29.4 us per request.
    #: ``iteration_overhead_s``: the part that is exposed even when the host keeps up,
    #: ~580 us per iteration (Llama-3.1-8B FP8, B200, 1k/1k at concurrency 64, nsys trace;
    #: NVIDIA/TensorRT-LLM issue 13957). Both measured on other GPUs and CPUs than the
    #: validation rows; neither is fitted to them.
    iteration_overhead_s: float = 580e-6
    host_per_request_s: float = 45.11e-3 / 1536
    #: Average number of prompt tokens a prefill token attends to, as a fraction of the
    #: prompt: 0.5 for causal attention.
    causal_fraction: float = 0.5
    #: Fused prefill attention's achieved fraction of the activation type's peak against
    #: the prompt's length in tokens (interpolated in log length, held at the ends):
    #: FlashAttention-3's forward pass on H100 SXM5, BF16, head dim 128 (Shah et al. 2024,
    #: arXiv 2407.08608, Figure 5c): 467, 565, 625, 638, 646 and 648 TFLOPS of 989.4 at 512,
    #: 1k, 2k, 4k, 8k and 16k tokens. The panel without the causal mask: the causal one is
    #: at or below it at every length, so for a causal prompt this is an upper bound. A
    #: ceiling on the GEMM curve, which otherwise lets attention reach the 0.80 of a large
    #: GEMM. Hopper's; pass another accelerator's own (``Curve((1.0,), (1.0,))``: no limit).
    fused_prefill_efficiency: Curve = field(default_factory=lambda: Curve(
        (512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0),
        tuple(t / 989.4 for t in (467.0, 565.0, 625.0, 638.0, 646.0, 648.0))))
    #: Whether attention is one fused kernel (FlashAttention / FlashDecoding, as every
    #: serving engine runs it). When not, the score matrix is written, and read and
    #: written again by the softmax (max, exponent, sum, divide): 6 passes over
    #: ``heads x query tokens x context`` elements in the activation type.
    attention_fused: bool = True

    def __post_init__(self) -> None:
        for name in ("weight_dtype", "kv_dtype", "activation_dtype"):
            if getattr(self, name) not in DTYPE_BYTES:
                raise ModelInputError(name, f"unknown data type {getattr(self, name)!r} "
                                      f"(known: {', '.join(DTYPE_BYTES)})")
        if not 0.0 < self.kv_cache_memory_fraction <= 1.0:
            raise ModelInputError("kv_cache_memory_fraction", "must be in (0, 1]")
        if self.max_batch_size < 1:
            raise ModelInputError("max_batch_size", "must be >= 1")
        if self.iteration_overhead_s < 0 or self.host_per_request_s < 0:
            raise ModelInputError("iteration_overhead_s", "host times must be >= 0")
        if self.gemm_row_tile < 1 or self.gemm_swap_tile_rows < 1:
            raise ModelInputError("gemm_row_tile", "tiles must be >= 1 row")


@dataclass(frozen=True, slots=True)
class Request:
    """Input and output tokens of every request (uniform lengths, as the max-throughput
    benchmarks generate them)."""

    input_tokens: int
    output_tokens: int

    def __post_init__(self) -> None:
        if self.input_tokens < 1 or self.output_tokens < 1:
            raise ModelInputError("input_tokens/output_tokens", "must be >= 1")


@dataclass(frozen=True, slots=True)
class Speculation:
    """A speculative-decoding setting: acceptance rate ``alpha`` per drafted token, or a
    mean accepted length per step (tree drafts), and the draft's cost: a draft model, or
    ``cost_ratio`` times a target decode iteration (Leviathan et al.'s ``c``)."""

    acceptance_rate: float = 0.0
    mean_accepted_tokens: float | None = None
    draft: Model | None = None
    cost_ratio: float = 0.0
    #: Tokens per sequence the target verifies in one pass. A chain of ``gamma`` drafted
    #: tokens verifies ``gamma + 1`` (None); a tree draft verifies all its nodes plus the
    #: root, more than its depth (EAGLE's tree: 5 draft passes, 25 nodes, 26 tokens).
    verify_tokens: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.acceptance_rate < 1.0:
            raise ModelInputError("acceptance_rate", "must be in [0, 1)")
        if self.mean_accepted_tokens is not None and self.mean_accepted_tokens < 1.0:
            raise ModelInputError("mean_accepted_tokens", "must be >= 1 (the bonus token)")
        if self.cost_ratio < 0.0:
            raise ModelInputError("cost_ratio", "must be >= 0")
        if self.verify_tokens is not None and self.verify_tokens < 2:
            raise ModelInputError("verify_tokens", "must be >= 2 (a drafted token and the "
                                  "bonus token)")


def expected_tokens(alpha: npt.ArrayLike, gamma: npt.ArrayLike) -> FloatArray:
    """Leviathan et al. 2023, Theorem 3.8: expected tokens per verification step,
    ``(1 - alpha^(gamma+1)) / (1 - alpha)`` (``gamma + 1`` when ``alpha`` = 1)."""
    a = np.asarray(alpha, dtype=np.float64)
    g = np.asarray(gamma, dtype=np.float64)
    safe = np.where(a < 1.0, a, 0.5)
    return np.where(a < 1.0, (1.0 - safe ** (g + 1.0)) / (1.0 - safe), g + 1.0)


class InferInfeasible(IntEnum):
    FEASIBLE = 0
    MEMORY_WEIGHTS = 1  # the weights alone do not fit
    MEMORY_KV = 2  # the KV cache of the requested concurrency does not fit
    HEADS_NOT_DIVISIBLE = 3
    TOO_FEW_LAYERS = 4
    EXPERTS_NOT_DIVISIBLE = 5


INFER_REASONS = {
    InferInfeasible.MEMORY_WEIGHTS: "weights do not fit in memory",
    InferInfeasible.MEMORY_KV: "KV cache of the concurrency does not fit",
    InferInfeasible.HEADS_NOT_DIVISIBLE: "attention heads do not split over tensor parallel",
    InferInfeasible.TOO_FEW_LAYERS: "fewer layers than pipeline stages",
    InferInfeasible.EXPERTS_NOT_DIVISIBLE: "experts do not split over expert parallel",
}


@dataclass(frozen=True, slots=True)
class InferLayouts:
    """Serving layouts, one per element. ``concurrency`` 0 means as many requests as the
    KV cache holds; ``draft_tokens`` 0 means no speculation. Expert parallelism splits the
    experts over ``expert_parallel`` of the ``tensor_parallel`` ranks (attention stays
    tensor parallel), as TensorRT-LLM's MoE mapping does."""

    tensor_parallel: IntArray
    pipeline_parallel: IntArray
    expert_parallel: IntArray
    concurrency: IntArray
    draft_tokens: IntArray

    @classmethod
    def one(cls, tp: int = 1, pp: int = 1, ep: int = 1, concurrency: int = 0,
            draft_tokens: int = 0) -> InferLayouts:
        def i(v: int) -> IntArray:
            return np.asarray([v], dtype=np.int64)
        return cls(i(tp), i(pp), i(ep), i(concurrency), i(draft_tokens))

    def __len__(self) -> int:
        return int(self.tensor_parallel.size)

    @property
    def accelerators(self) -> IntArray:
        return self.tensor_parallel * self.pipeline_parallel


# --- parameters and memory -----------------------------------------------------------------


def _el(dtype: str) -> float:
    return float(DTYPE_BYTES[dtype])


def kv_bytes_per_token(model: Model, kv_dtype: str, tp: npt.ArrayLike = 1,
                       pp: npt.ArrayLike = 1) -> FloatArray:
    """KV-cache bytes one token occupies on one rank: K and V of ``max(g / tp, 1)`` KV
    heads (GQA/MQA share a KV head among query heads; a rank holds at least one) of
    ``d`` elements, on the ``ceil(L / pp)`` layers of its stage. With ``tp = pp = 1``
    this is the whole model's ``2 L g d`` elements per token."""
    t = np.asarray(tp, dtype=np.float64)
    p = np.asarray(pp, dtype=np.float64)
    heads = np.maximum(np.ceil(model.kv_heads / t), 1.0)
    return 2.0 * np.ceil(model.layers / p) * heads * model.head_dim * _el(kv_dtype)


def weight_bytes_per_rank(model: Model, serving: Serving, tp: FloatArray,
                          pp: FloatArray) -> FloatArray:
    """Weights on the fullest rank: its stage's layers split by tensor parallelism
    (experts split over all ``tp`` ranks of the group), the input embedding on the first
    stage and the LM head (in the activation type) on the last; with one stage both."""
    split, replicated = layer_params(model)
    layers = np.ceil(model.layers / pp)
    per_layer = (split + expert_params(model)) / tp + replicated
    emb = model.vocab_size * model.hidden_size / tp
    head = 0.0 if model.tied_embeddings else emb
    ends = np.where(pp > 1, np.maximum(emb, head), emb + head)
    return layers * per_layer * _el(serving.weight_dtype) + ends * _el(serving.activation_dtype)


def activation_workspace_bytes(model: Model, serving: Serving, tokens: FloatArray,
                               tp: FloatArray) -> FloatArray:
    """The largest live activation set of one iteration: the FC1 output and its input
    (the widest tensors), for ``tokens`` tokens, in the activation type."""
    gate = 2.0 if model.ffn_gated else 1.0
    f = (model.ffn_hidden_size if model.moe is None
         else model.moe.expert_ffn_hidden_size * model.moe.top_k)
    return tokens * (f * gate / tp + 2 * model.hidden_size) * _el(serving.activation_dtype)


#: trtllm-bench caps ``max_num_tokens`` at 32,768 "to avoid TRT activation buffer becoming
#: too large" (tensorrt_llm/bench/build/tuning.py, finetune_setting).
MAX_NUM_TOKENS_CAP = 32768.0


def kv_cache_tokens(system: System, model: Model, serving: Serving, tp: FloatArray,
                    weights_bytes: FloatArray, kv_bytes_per_token_rank: FloatArray,
                    workspace_tokens: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Free bytes per rank after weights and the runtime reserve (the reserve includes the
    activation workspace of an iteration of ``workspace_tokens`` tokens), and the KV-cache
    tokens that ``kv_cache_memory_fraction`` of it holds (per model replica)."""
    reserve = serving.runtime_reserve_bytes + activation_workspace_bytes(
        model, serving, workspace_tokens, tp)
    free = system.accelerator.memory_bytes - weights_bytes - reserve
    kv_cap_bytes = np.maximum(free, 0.0) * serving.kv_cache_memory_fraction
    return free, np.floor(kv_cap_bytes / kv_bytes_per_token_rank)


# --- one iteration ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IterationArrays:
    """One engine iteration on one pipeline stage, term by term (seconds)."""

    gemm_s: FloatArray
    attention_s: FloatArray
    elementwise_s: FloatArray
    lm_head_s: FloatArray
    tp_comm_s: FloatArray
    ep_comm_s: FloatArray
    pp_comm_s: FloatArray
    overhead_s: FloatArray

    @property
    def total_s(self) -> FloatArray:
        return (self.gemm_s + self.attention_s + self.elementwise_s + self.lm_head_s
                + self.tp_comm_s + self.ep_comm_s + self.pp_comm_s + self.overhead_s)

    def scaled(self, k: FloatArray) -> IterationArrays:
        return IterationArrays(*(getattr(self, f) * k for f in ITERATION_TERMS))


ITERATION_TERMS = ("gemm_s", "attention_s", "elementwise_s", "lm_head_s", "tp_comm_s",
                   "ep_comm_s", "pp_comm_s", "overhead_s")


def roofline_s(system: System, dtype: str, ratio: float, flops: FloatArray,
               bytes_: FloatArray, count: float | FloatArray = 1.0,
               ceiling: float | FloatArray = 1.0) -> FloatArray:
    """Seconds of ``count`` equal operations of ``flops`` FLOPs and ``bytes_`` bytes in
    all: the slower of compute (at the matmul curve, at most ``ceiling``, times
    ``ratio``) and memory."""
    acc = system.accelerator
    per = flops / np.maximum(count, 1.0)
    eff = np.minimum(acc.matmul_efficiency.at(per), ceiling) * ratio
    compute = np.where(flops > 0, flops / (acc.peak(dtype) * eff), 0.0)
    mem = bytes_ / (acc.memory_bandwidth_bytes_per_s * acc.memory_efficiency.at(bytes_))
    return np.asarray(np.maximum(compute, mem), dtype=np.float64)


def padded_rows(serving: Serving, rows: FloatArray) -> FloatArray:
    """Rows a GEMM over ``rows`` tokens computes: whole ``gemm_row_tile`` tiles, or
    whole ``gemm_swap_tile_rows`` steps below half a tile, where kernels swap the
    operands (see :class:`Serving`). Zero rows stay zero."""
    big = float(serving.gemm_row_tile)
    small = float(serving.gemm_swap_tile_rows)
    r = np.asarray(rows, dtype=np.float64)
    return np.where(r < big / 2.0, np.ceil(r / small) * small, np.ceil(r / big) * big)


def _prefill_ceiling(system: System, serving: Serving, head_dim: float,
                     prefill_context: FloatArray) -> float | FloatArray:
    """The most of peak a prefill's attention reaches. Fused: the published rate of a fused
    kernel at the prompt's length (``Serving.fused_prefill_efficiency``; the prompt is
    ``prefill_context / causal_fraction`` tokens). Unfused: half the FLOPs in ``Q K^T``,
    half in ``P V``, each at the system's measured rate for the head dimension (the
    training model's rule, :mod:`netio.model.training`), so the pair runs at the harmonic
    mean of the two; no limit without the measurements. Decode keeps the plain curve: its
    products are one or a few query rows against the cache, not the square products the
    rates were measured on."""
    acc = system.accelerator
    if serving.attention_fused:
        frac = serving.causal_fraction if serving.causal_fraction > 0 else 1.0
        return serving.fused_prefill_efficiency.at(prefill_context / frac)
    score, value = acc.attention_score_efficiency, acc.attention_over_value_efficiency
    if score is None or value is None:
        return 1.0
    e_score, e_value = float(score.at(head_dim)), float(value.at(head_dim))
    return 2.0 / (1.0 / e_score + 1.0 / e_value)


def iteration(system: System, model: Model, serving: Serving, tp: FloatArray,
              pp: FloatArray, ep: FloatArray, decode_seqs: FloatArray,
              tokens_per_seq: FloatArray, prefill_tokens: FloatArray,
              decode_context: FloatArray, prefill_context: FloatArray,
              sampled_seqs: FloatArray,
              logit_rows: FloatArray | None = None) -> IterationArrays:
    """Time of one iteration of one pipeline stage (see the module doc), per layout.
    ``sampled_seqs`` requests are walked by the host; ``logit_rows`` positions go through
    the LM head (``sampled_seqs`` when None; a verification needs the logits of every
    verified token, not only of the last)."""
    lr = sampled_seqs if logit_rows is None else logit_rows
    wd, ad = serving.weight_dtype, serving.activation_dtype
    wb, ab, kb = _el(wd), _el(ad), _el(serving.kv_dtype)
    ratio_w = serving.matmul_efficiency_ratio_by_dtype.get(wd, 1.0)
    ratio_a = serving.matmul_efficiency_ratio_by_dtype.get(ad, 1.0)
    h, a, d = float(model.hidden_size), float(model.attention_heads), float(model.head_dim)
    kvd = float(model.kv_heads * model.head_dim)
    gate = 2.0 if model.ffn_gated else 1.0
    m = decode_seqs * tokens_per_seq + prefill_tokens
    layers = np.ceil(model.layers / pp)

    def gemm(k: float | FloatArray, n: float | FloatArray, rows: FloatArray | None = None,
             count: float | FloatArray = 1.0, frac: float | FloatArray = 1.0) -> FloatArray:
        r = m if rows is None else rows
        # The tensor cores work on whole tiles of rows: each touched matrix (one, or the
        # experts the tokens reach) computes its rows rounded up to the tile.
        mats = np.maximum(count * frac, 1e-12)
        flops = 2.0 * padded_rows(serving, r / mats) * mats * k * n
        bytes_ = wb * k * n * count * frac + r * k * wb + r * n * ab
        return roofline_s(system, wd, ratio_w, flops, bytes_, count)

    g = gemm(h, (h + 2 * kvd) / tp) + gemm(h / tp, h)
    if model.moe is None:
        f = float(model.ffn_hidden_size)
        g = g + gemm(h, f * gate / tp) + gemm(f / tp, h)
        ffn_cols = f / tp
    else:
        mo = model.moe
        fe = float(mo.expert_ffn_hidden_size)
        local = mo.experts / ep
        width = fe * ep / tp  # each expert split over the tp/ep ranks that hold it
        touched = 1.0 - (1.0 - mo.top_k / mo.experts) ** m
        rows = m * mo.top_k / ep  # token-expert pairs handled by this rank
        g = g + gemm(h, width * gate, rows, local, touched) + gemm(width, h, rows, local,
                                                                   touched)
        g = g + gemm(h, float(mo.experts))  # router
        ffn_cols = width * mo.top_k / ep
        if mo.shared_experts:
            fs = fe * mo.shared_experts
            g = g + gemm(h, fs * gate / tp) + gemm(fs / tp, h)
            ffn_cols = ffn_cols + fs / tp
    # Attention: decode reads each sequence's KV cache; prefill attends causally.
    kv_rank = 2.0 * np.maximum(np.ceil(model.kv_heads / tp), 1.0) * d
    dec_bytes = decode_seqs * decode_context * kv_rank * kb
    dec_flops = 4.0 * decode_seqs * tokens_per_seq * decode_context * a * d / tp
    pre_flops = 4.0 * prefill_tokens * prefill_context * a * d / tp
    pre_bytes = prefill_tokens * (kv_rank * kb + 2 * a * d / tp * ab)
    if not serving.attention_fused:
        dec_bytes = dec_bytes + 6.0 * ab * decode_seqs * tokens_per_seq * decode_context * a / tp
        pre_bytes = pre_bytes + 6.0 * ab * prefill_tokens * prefill_context * a / tp
    attn = (roofline_s(system, ad, ratio_a, dec_flops, dec_bytes)
            + roofline_s(system, ad, ratio_a, pre_flops, pre_bytes,
                         ceiling=_prefill_ceiling(system, serving, d, prefill_context)))
    # Unfused element-wise traffic per token: two residual-add + RMSNorm (read input and
    # residual, write residual and the normalised input in the GEMM type), rotary on Q
    # and K plus the KV-cache write, the gated activation (read gate and up, write one).
    per_tok = (2 * (3 * h * ab + h * wb) + (h + 2 * kvd) / tp * ab * 2 + 2 * kvd / tp * kb
               + ffn_cols * (gate * ab + wb))
    zero = np.zeros_like(m)
    elem = roofline_s(system, ad, 1.0, zero, m * per_tok)
    # LM head on the last stage (in the activation type), for the sampled sequences.
    v = float(model.vocab_size)
    head = roofline_s(system, ad, ratio_a, 2.0 * padded_rows(serving, lr) * h * v / tp,
                     ab * (h * v / tp + lr * (h + v / tp)))
    # Communication.
    G = system.node.accelerators
    act = m * h * ab
    tp_paths = paths(system, tp, ranks_per_node(tp, 1, G))
    ar, _ = best_time(Collective.ALL_REDUCE, act, tp_paths)
    tp_comm = layers * 2.0 * ar
    if model.moe is not None:
        ep_paths = paths(system, ep, ranks_per_node(ep, tp / ep, G))
        a2a, _ = best_time(Collective.ALL_TO_ALL, act * model.moe.top_k, ep_paths)
        ep_comm = np.where(ep > 1, layers * 2.0 * a2a, 0.0)
    else:
        ep_comm = zero
    pp_paths = paths(system, np.full_like(pp, 2.0), ranks_per_node(2, tp, G))
    hop, _ = best_time(Collective.SEND_RECV, act / tp, pp_paths)
    pp_comm = np.where(pp > 1, hop, 0.0)
    gpu = (layers * (g + attn + elem) + head / pp + tp_comm + ep_comm + pp_comm)
    # Host: each stage's executor walks the requests of its micro-batch once per
    # iteration; what the GPU's own work does not cover is exposed (Serving).
    host = serving.host_per_request_s * sampled_seqs
    overhead = np.maximum(serving.iteration_overhead_s, host - gpu)
    return IterationArrays(
        gemm_s=layers * g, attention_s=layers * attn, elementwise_s=layers * elem,
        lm_head_s=head / pp, tp_comm_s=tp_comm, ep_comm_s=ep_comm, pp_comm_s=pp_comm,
        overhead_s=zero + overhead)


# --- serving ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServingArrays:
    """Steady-state serving of every layout (per-token times in seconds)."""

    concurrency: FloatArray  # requests in flight
    max_concurrency: FloatArray  # the largest that the KV cache holds
    kv_capacity_tokens: FloatArray  # per model replica
    weights_bytes: FloatArray  # per rank
    kv_cache_bytes: FloatArray  # per rank, in use at this concurrency
    output_tokens_per_s: FloatArray  # the system (one replica)
    output_tokens_per_s_per_user: FloatArray
    output_tokens_per_s_per_accelerator: FloatArray
    tpot_s: FloatArray  # time per output token, per user
    ttft_s: FloatArray  # time to first token at this concurrency, no queueing
    accepted_tokens_per_step: FloatArray  # 1 without speculation
    stage: IterationArrays  # one iteration of one stage, the verification with a draft
    draft_s: FloatArray  # the draft iterations of one step
    infeasible: IntArray


def serve(system: System, model: Model, serving: Serving, request: Request,
          lay: InferLayouts, speculation: Speculation | None = None) -> ServingArrays:
    """Steady-state continuous batching of ``request`` for every layout (module doc)."""
    if system.weight_streaming is not None:
        raise ModelInputError("weight_streaming", "this system streams its weights; use "
                              "netio-model wafer (netio.model.wafer)", path=system.name)
    spec = speculation or Speculation()
    tp = lay.tensor_parallel.astype(np.float64)
    pp = lay.pipeline_parallel.astype(np.float64)
    ep = lay.expert_parallel.astype(np.float64)
    gamma = lay.draft_tokens.astype(np.float64)
    isl, osl = float(request.input_tokens), float(request.output_tokens)

    weights = weight_bytes_per_rank(model, serving, tp, pp)
    if spec.draft is not None:
        weights = weights + np.where(gamma > 0, weight_bytes_per_rank(
            spec.draft, serving, tp, pp), 0.0)
    kv_tok = kv_bytes_per_token(model, serving.kv_dtype, tp, pp)
    if spec.draft is not None:
        kv_tok = kv_tok + np.where(gamma > 0, kv_bytes_per_token(spec.draft, serving.kv_dtype,
                                                                 tp, pp), 0.0)
    reserve_tokens = np.full_like(tp, float(serving.max_batch_size)) * (1 + isl / osl)
    reserve_tokens = np.minimum(reserve_tokens, MAX_NUM_TOKENS_CAP)
    free, kv_tokens = kv_cache_tokens(system, model, serving, tp, weights, kv_tok,
                                      reserve_tokens)
    # Tokens per sequence in one verification: the chain and its bonus token, or the
    # tree's nodes and its root.
    verified = (gamma + 1.0 if spec.verify_tokens is None
                else np.full_like(gamma, float(spec.verify_tokens)))
    q = np.where(gamma > 0, verified, 1.0)
    per_request = isl + osl + q - 1.0
    fits = np.floor(kv_tokens / per_request)
    max_conc = np.minimum(fits, float(serving.max_batch_size))
    want = lay.concurrency.astype(np.float64)
    conc = np.where(want > 0, want, max_conc)

    if spec.mean_accepted_tokens is not None:
        accepted = np.where(gamma > 0, spec.mean_accepted_tokens, 1.0)
    else:
        accepted = np.where(gamma > 0, expected_tokens(spec.acceptance_rate, gamma), 1.0)
    b = np.maximum(conc / pp, 1e-9)  # sequences per micro-batch
    # Per iteration, each sequence advances ``accepted`` tokens, so b*accepted/osl
    # requests finish and as many prompts (isl tokens each) are prefilled.
    prefill = b * accepted * isl / osl
    ctx_d = isl + osl / 2.0
    ctx_p = isl * serving.causal_fraction
    stage = iteration(system, model, serving, tp, pp, ep, b, q, prefill, ctx_d + 0 * b,
                      ctx_p + 0 * b, b + prefill / isl, b * q + prefill / isl)
    step = stage.total_s
    if spec.draft is not None:
        one = np.ones_like(b)
        dstage = iteration(system, spec.draft, serving, tp, pp, ep, b, one, 0 * b,
                           ctx_d + 0 * b, 0 * b, b)
        draft = gamma * dstage.total_s
    else:
        plain = iteration(system, model, serving, tp, pp, ep, b, np.ones_like(b), 0 * b,
                          ctx_d + 0 * b, 0 * b, b)
        draft = gamma * spec.cost_ratio * plain.total_s
    draft = np.where(gamma > 0, draft, 0.0)
    t_stage = step + draft
    tps = b * accepted / t_stage
    tpot = pp * t_stage / accepted
    ttft_stage = iteration(system, model, serving, tp, pp, ep, b, np.ones_like(b),
                           np.maximum(prefill, isl), ctx_d + 0 * b, ctx_p + 0 * b,
                           b + 1.0)
    ttft = pp * ttft_stage.total_s

    reason = np.zeros(len(lay), dtype=np.int64)
    bad_experts = (np.zeros(len(lay), dtype=np.bool_) if model.moe is None else
                   (model.moe.experts % lay.expert_parallel != 0))
    checks = [
        (InferInfeasible.MEMORY_KV, (conc > fits) | (fits < 1)),
        (InferInfeasible.MEMORY_WEIGHTS, free <= 0),
        (InferInfeasible.EXPERTS_NOT_DIVISIBLE,
         bad_experts | (lay.tensor_parallel % lay.expert_parallel != 0)),
        (InferInfeasible.TOO_FEW_LAYERS, lay.pipeline_parallel > model.layers),
        (InferInfeasible.HEADS_NOT_DIVISIBLE, model.attention_heads % lay.tensor_parallel != 0),
    ]
    for code, bad in checks:  # the last failing check wins (a layout that cannot be built
        # is reported as such before what it would need in memory)
        reason = np.where(bad, int(code), reason)
    n_acc = (tp * pp)
    return ServingArrays(
        concurrency=conc, max_concurrency=max_conc, kv_capacity_tokens=kv_tokens,
        weights_bytes=weights, kv_cache_bytes=np.minimum(conc, fits) * per_request * kv_tok,
        output_tokens_per_s=tps, output_tokens_per_s_per_user=1.0 / tpot,
        output_tokens_per_s_per_accelerator=tps / n_acc, tpot_s=tpot, ttft_s=ttft,
        accepted_tokens_per_step=accepted, stage=stage, draft_s=draft, infeasible=reason)


# --- disaggregated prefill / decode ------------------------------------------------------------


def kv_transfer_s(system: System, model: Model, serving: Serving, request: Request,
                  tp: int, pp: int) -> float:
    """Seconds to move one prompt's KV cache from a prefill worker of ``tp x pp`` ranks
    to a decode worker on another node: each rank sends its shard at once over its share
    of the node's NICs (a send/recv on the scale-out link or fabric profile)."""
    total = float(kv_bytes_per_token(model, serving.kv_dtype)[()]) * request.input_tokens
    shard = total / (tp * pp)
    p = paths(system, np.asarray([2.0]), np.asarray([1.0]))
    t, _ = best_time(Collective.SEND_RECV, np.asarray([shard]), p)
    return float(t[0])


# --- one configuration: the typed, explained result ------------------------------------------


@dataclass(frozen=True, slots=True)
class InferResult:
    system: str
    model: str
    tensor_parallel: int
    pipeline_parallel: int
    expert_parallel: int
    accelerators: int
    input_tokens: int
    output_tokens: int
    feasible: bool
    infeasible_reason: str
    concurrency: float
    max_concurrency: float
    kv_bytes_per_token: float  # whole model, one token
    kv_capacity_tokens: float
    weights_per_accelerator_bytes: float
    kv_cache_per_accelerator_bytes: float
    output_tokens_per_s: float
    output_tokens_per_s_per_user: float
    output_tokens_per_s_per_accelerator: float
    tpot_s: float
    ttft_s: float
    accepted_tokens_per_step: float
    draft_tokens: int
    iteration_breakdown_s: dict[str, float]
    draft_s: float
    bottleneck: str
    disaggregated: dict[str, float] | None = None

    def to_json_dict(self) -> dict[str, object]:
        return {
            "system": self.system, "model": self.model,
            "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "expert_parallel": self.expert_parallel, "accelerators": self.accelerators,
            "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "feasible": self.feasible, "infeasible_reason": self.infeasible_reason or None,
            "concurrency_requests": self.concurrency,
            "max_concurrency_requests": self.max_concurrency,
            "kv_cache_per_token_bytes": self.kv_bytes_per_token,
            "kv_cache_capacity_tokens": self.kv_capacity_tokens,
            "weights_per_accelerator_bytes": self.weights_per_accelerator_bytes,
            "kv_cache_per_accelerator_bytes": self.kv_cache_per_accelerator_bytes,
            "output_tokens_per_s": self.output_tokens_per_s,
            "output_tokens_per_s_per_user": self.output_tokens_per_s_per_user,
            "output_tokens_per_s_per_accelerator": self.output_tokens_per_s_per_accelerator,
            "time_per_output_token_s": self.tpot_s, "time_to_first_token_s": self.ttft_s,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens_per_step": self.accepted_tokens_per_step,
            "iteration_breakdown_s": dict(self.iteration_breakdown_s),
            "draft_per_step_s": self.draft_s, "bottleneck": self.bottleneck,
            "disaggregated": dict(self.disaggregated) if self.disaggregated else None,
        }

    def to_text(self) -> str:
        gib = GiB
        lines = [
            f"{self.model} on {self.accelerators} x {self.system} (TP {self.tensor_parallel}, "
            f"PP {self.pipeline_parallel}, EP {self.expert_parallel}), "
            f"{self.input_tokens} in / {self.output_tokens} out",
            "" if self.feasible else f"INFEASIBLE: {self.infeasible_reason}",
            f"concurrency {self.concurrency:,.0f} requests (KV cache holds "
            f"{self.max_concurrency:,.0f}: {self.kv_capacity_tokens:,.0f} tokens of "
            f"{self.kv_bytes_per_token / 1024:.1f} KiB)",
            f"output {self.output_tokens_per_s:,.0f} tokens/s "
            f"({self.output_tokens_per_s_per_accelerator:,.0f} per accelerator, "
            f"{self.output_tokens_per_s_per_user:,.1f} per user)",
            f"time per output token {self.tpot_s * 1e3:.2f} ms, time to first token "
            f"{self.ttft_s * 1e3:.2f} ms",
        ]
        if self.draft_tokens:
            lines.append(f"speculation: {self.draft_tokens} drafted, "
                         f"{self.accepted_tokens_per_step:.2f} tokens per step, draft "
                         f"{self.draft_s * 1e3:.2f} ms per step")
        total = sum(self.iteration_breakdown_s.values())
        lines.append(f"{'one iteration of one stage':<28}{'time[ms]':>10}{'share':>8}")
        for k, v in self.iteration_breakdown_s.items():
            lines.append(f"{k:<28}{v * 1e3:>10.3f}{v / total if total else 0:>8.1%}")
        lines.append(f"bottleneck: {self.bottleneck}")
        lines.append(f"memory per accelerator [GiB]: weights "
                     f"{self.weights_per_accelerator_bytes / gib:.2f}, KV cache in use "
                     f"{self.kv_cache_per_accelerator_bytes / gib:.2f}")
        if self.disaggregated:
            dg = self.disaggregated
            lines.append(f"disaggregated: KV transfer {dg['kv_transfer_s'] * 1e3:.2f} ms per "
                         f"request, TTFT {dg['ttft_s'] * 1e3:.2f} ms, "
                         f"{dg['prefill_workers_per_decode_worker']:.2f} prefill workers per "
                         "decode worker")
        return "\n".join(line for line in lines if line != "")


def _bottleneck(stage: Mapping[str, float]) -> str:
    return max(stage, key=lambda k: stage[k]).removesuffix("_s")


def infer(system: System, model: Model, request: Request, serving: Serving | None = None,
          tp: int = 1, pp: int = 1, ep: int = 1, concurrency: int = 0, draft_tokens: int = 0,
          speculation: Speculation | None = None,
          disaggregate: bool = False) -> InferResult:
    """One serving configuration, explained (``concurrency`` 0: as many as fit)."""
    sv = serving or Serving()
    lay = InferLayouts.one(tp, pp, ep, concurrency, draft_tokens)
    r = serve(system, model, sv, request, lay, speculation)

    def f(x: FloatArray) -> float:
        return float(x[0])

    stage = {k: f(getattr(r.stage, k)) for k in ITERATION_TERMS}
    code = int(r.infeasible[0])
    reason = ""
    if code:
        reason = INFER_REASONS[InferInfeasible(code)]
        if code == InferInfeasible.MEMORY_KV:
            reason += (f": {max(concurrency, 1)} request(s) of "
                       f"{request.input_tokens + request.output_tokens + draft_tokens}"
                       f" tokens need more than the {f(r.kv_capacity_tokens):,.0f} tokens the "
                       "cache holds")
        elif code == InferInfeasible.MEMORY_WEIGHTS:
            reason += (f": {f(r.weights_bytes) / GiB:.2f} GiB per accelerator of "
                       f"{system.accelerator.memory_bytes / GiB:.2f}")
    dis = None
    if disaggregate:
        xfer = kv_transfer_s(system, model, sv, request, tp, pp)
        one = serve(system, model, sv, request, InferLayouts.one(tp, pp, ep, 1, 0))
        prefill_alone = iteration(
            system, model, sv, np.asarray([float(tp)]), np.asarray([float(pp)]),
            np.asarray([float(ep)]), np.asarray([0.0]), np.asarray([1.0]),
            np.asarray([float(request.input_tokens)]), np.asarray([0.0]),
            np.asarray([request.input_tokens * sv.causal_fraction]), np.asarray([1.0]))
        t_prefill = pp * f(prefill_alone.total_s)
        decode_rate = f(r.concurrency) / (request.output_tokens * f(r.tpot_s))
        dis = {"kv_transfer_bytes": float(kv_bytes_per_token(model, sv.kv_dtype)[()])
               * request.input_tokens,
               "kv_transfer_s": xfer, "prefill_s": t_prefill, "ttft_s": t_prefill + xfer,
               "prefill_workers_per_decode_worker": decode_rate * t_prefill / pp,
               "decode_only_tpot_s": f(one.tpot_s)}
    return InferResult(
        system.name, model.name, tp, pp, ep, tp * pp, request.input_tokens,
        request.output_tokens, code == 0, reason, f(r.concurrency), f(r.max_concurrency),
        float(kv_bytes_per_token(model, sv.kv_dtype)[()]), f(r.kv_capacity_tokens),
        f(r.weights_bytes), f(r.kv_cache_bytes), f(r.output_tokens_per_s),
        f(r.output_tokens_per_s_per_user), f(r.output_tokens_per_s_per_accelerator),
        f(r.tpot_s), f(r.ttft_s), f(r.accepted_tokens_per_step), draft_tokens, stage,
        f(r.draft_s), _bottleneck(stage), dis)


def speedup_vs_batch(system: System, model: Model, request: Request, serving: Serving,
                     speculation: Speculation, gamma: int, batches: list[int],
                     tp: int = 1) -> list[float]:
    """Per-user speed-up of speculation with ``gamma`` drafted tokens over plain decoding,
    at each batch size (the batch-size effect)."""
    n = len(batches)
    conc = np.asarray(batches, dtype=np.int64)
    ones = np.ones(n, dtype=np.int64)
    base = serve(system, model, serving, request,
                 InferLayouts(ones * tp, ones, ones, conc, ones * 0), speculation)
    spec = serve(system, model, serving, request,
                 InferLayouts(ones * tp, ones, ones, conc, ones * gamma), speculation)
    return [float(x) for x in base.tpot_s / spec.tpot_s]

