"""A max-throughput benchmark run as ``trtllm-bench throughput`` performs it, iteration by
iteration: a finite set of identical requests, all waiting at t = 0.

:func:`netio.model.inference.serve` answers the steady state. The published benchmark is
not one: ``prepare_dataset.py ... token-norm-dist --num-requests N --input-stdev 0
--output-stdev 0`` gives N requests of exactly ``isl`` prompt and ``osl`` output tokens
(NVIDIA TensorRT-LLM, docs/source/performance/perf-overview.md, "Preparing a Dataset":
N = 30,000 for 128/128, 3,000 for 128/2048, 1000/1000, 500/2000 and 2048/128, 1,500 for
128/4096, 1000/2000, 2048/2048 and 5000/500, 1,000 for 20000/2000), all submitted at once,
and throughput is output tokens over the whole run, ramp-up and drain included.

**Settings** (trtllm-bench, PyTorch backend, TensorRT-LLM 1.0; :func:`bench_settings`):
``max_batch_size`` and ``max_num_tokens`` come from tensorrt_llm/bench/build/tuning.py:
the KV cache is estimated as ``(memory x GPUs - parameters x bytes per weight) x
kv_cache_free_gpu_mem_fraction`` (0.90, the ``throughput`` command's default), divided by
``2 L max(tp, g) d`` KV bytes per token times ``isl + osl``; the batch is that many
requests, at most 4,096, divided by the pipeline stages and rounded *up* (to 32 below 256,
at least 64; to 128 below 1,024; to 256 above); the token budget is ``batch (1 + isl/osl)``,
at most 32,768, rounded up (to 256 below 4,096, at least 2,048; 512 below 8,192; 1,024
above). Chunked prefill is off for the PyTorch backend (``throughput --enable_chunked_context``
defaults to off there, NVIDIA/TensorRT-LLM pull request 6956), so
tensorrt_llm/bench/benchmark/utils/general.py raises the budget to at least
``max_isl + max_batch_size``: a prompt always fits whole.

**Scheduler** (TensorRT-LLM's capacity and micro-batch schedulers, "Scheduler" in its
PyTorch docs): the capacity policy is ``GUARANTEED_NO_EVICT`` (trtllm-bench's default):
a request starts only if the KV blocks of its whole sequence (``ceil((isl + osl) / 32)``
blocks of ``tokens_per_block`` = 32, the LLM API's KvCacheConfig default) are free
besides those reserved for the requests in flight, and at most ``max_batch_size``
requests are in flight. The micro-batch scheduler fills one iteration with every
generation request (one token each) and, in arrival order, whole prompts while the
iteration stays within ``max_num_tokens``; context and generation requests share the
iteration (in-flight batching). The context iteration produces the request's first
output token; each later iteration one more. The PyTorch executor's overlap scheduler
(on by default) launches iteration n+1 before it has checked the stop criteria of n, so
a request that has produced its last token runs "one extra decoding step" (TensorRT-LLM
docs, "Overlap Scheduler": "The optimization introduces one extra decoding step"),
holding its batch slot and its KV blocks and costing a row of every GEMM.

**Time**: every iteration is timed by :func:`netio.model.inference.iteration`, the same
roofline and host terms as the steady state; only what each iteration carries differs.

**Speed**: scheduling does not depend on time (every request is waiting from the start),
so the schedule is built first and then timed in one vectorised call. Between two
events (a prompt admitted, a cohort leaving) the iterations are identical but for the
decode context, which grows by one token per iteration; such a stretch is one row timed
at its mean context, cut every :data:`ROW_ITERATIONS` iterations so the attention term,
linear in the context, is sampled finely. Requests admitted in the same iteration move
together (a cohort), so the state is a handful of cohorts, never a list of requests.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from netio.errors import ModelInputError
from netio.model.inference import (
    ITERATION_TERMS,
    MAX_NUM_TOKENS_CAP,
    GiB,
    Request,
    Serving,
    iteration,
    kv_bytes_per_token,
    kv_cache_tokens,
    weight_bytes_per_rank,
)
from netio.model.memory import expert_params, layer_params
from netio.model.schema import DTYPE_BYTES, FloatArray, Model, System

#: The CUDA-graph batch sizes of perf-overview.md's ``llm_options.yml``.
PERF_OVERVIEW_CUDA_GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024,
                                        2048, 4096, 8192)

#: Longest stretch of identical decode iterations timed as one row (see module doc).
ROW_ITERATIONS = 64


@dataclass(frozen=True, slots=True)
class BenchRun:
    """One benchmark run: ``requests`` identical requests, all waiting at t = 0.

    ``max_batch_size`` / ``max_num_tokens`` 0: derived as trtllm-bench derives them
    (:func:`bench_settings`); ``concurrency`` 0: no limit besides those (trtllm-bench's
    ``--concurrency`` otherwise). ``overlap_extra_step``: the PyTorch executor's overlap
    scheduler (module doc); ``tokens_per_block``: the KV-cache block (LLM API default 32).
    """

    requests: int
    max_batch_size: int = 0
    max_num_tokens: int = 0
    concurrency: int = 0
    tokens_per_block: int = 32
    overlap_extra_step: bool = True
    #: Batch sizes with a captured CUDA graph, padding on: perf-overview.md's
    #: ``llm_options.yml`` (``cuda_graph_config: enable_padding: true, batch_sizes: [1, 2,
    #: 4, ..., 8192]``). Empty: no CUDA graphs, no padding.
    cuda_graph_batch_sizes: tuple[int, ...] = PERF_OVERVIEW_CUDA_GRAPH_BATCH_SIZES

    def __post_init__(self) -> None:
        if self.requests < 1:
            raise ModelInputError("requests", "must be >= 1")
        if min(self.max_batch_size, self.max_num_tokens, self.concurrency) < 0:
            raise ModelInputError("max_batch_size", "limits must be >= 0 (0: derived)")
        if self.tokens_per_block < 1:
            raise ModelInputError("tokens_per_block", "must be >= 1")


def graph_batch_sizes(run: BenchRun, max_batch_size: int, max_num_tokens: int) -> list[int]:
    """The batch sizes the PyTorch executor captures: those listed up to
    ``min(max_batch_size, max_num_tokens)`` (the largest pure-decode batch), and that
    bound itself when a larger size was listed (model_engine.py,
    ``_filter_cuda_graph_batch_sizes``: "padding to max_cuda_graph_bs is acceptable")."""
    bound = min(max_batch_size, max_num_tokens)
    sizes = sorted({b for b in run.cuda_graph_batch_sizes if b <= bound})
    if any(b > bound for b in run.cuda_graph_batch_sizes) and bound not in sizes:
        sizes.append(bound)
    return sizes


def padded_decode_batch(sizes: list[int], decode_seqs: FloatArray,
                        prefill_requests: FloatArray) -> FloatArray:
    """Requests a generation-only iteration runs once padded to the next captured CUDA
    graph (dummy generation requests appended to the batch, model_engine.py
    ``_maybe_pad_batch``); iterations with prompts run eagerly, unpadded, as do batches
    above the largest graph."""
    if not sizes:
        return decode_seqs
    table = np.asarray(sizes, dtype=np.float64)
    idx = np.searchsorted(table, decode_seqs, side="left")
    graphed = (prefill_requests == 0) & (idx < table.size) & (decode_seqs > 0)
    return np.where(graphed, table[np.minimum(idx, table.size - 1)], decode_seqs)


def _round_up(x: float, step: int) -> int:
    return step * math.ceil(x / step)


def model_parameters(model: Model) -> float:
    """All parameters of the model: every layer (experts included), the input embedding
    and, when untied, the LM head."""
    split, replicated = layer_params(model)
    emb = float(model.vocab_size * model.hidden_size)
    return (model.layers * (split + replicated + expert_params(model)) + emb
            + (0.0 if model.tied_embeddings else emb))


def bench_settings(system: System, model: Model, serving: Serving, request: Request,
                   tp: int = 1, pp: int = 1) -> tuple[int, int]:
    """``(max_batch_size, max_num_tokens)`` as trtllm-bench derives them for a dataset of
    identical ``request``s (tuning.py ``calc_engine_setting`` and ``finetune_setting``,
    then general.py's floor for unchunked prefill; module doc). The estimate is
    trtllm-bench's own, coarser than the runtime's KV cache: every parameter at the
    weight type's size, the whole memory of the GPUs, no runtime reserve."""
    isl, osl = request.input_tokens, request.output_tokens
    gpus = tp * pp
    engine_gib = model_parameters(model) * DTYPE_BYTES[serving.weight_dtype] / GiB
    available_gib = system.accelerator.memory_bytes * gpus / GiB - engine_gib
    kv_gib_per_token = (2 * model.layers * max(tp, model.kv_heads) * model.head_dim
                        * DTYPE_BYTES[serving.kv_dtype] / GiB)
    cache_gib = available_gib * serving.kv_cache_memory_fraction
    max_requests = cache_gib / (kv_gib_per_token * (isl + osl))
    if max_requests < 1:
        raise ModelInputError("requests", f"trtllm-bench would refuse: the KV cache it "
                              f"estimates ({cache_gib:.1f} GiB) holds no request of "
                              f"{isl + osl} tokens")
    raw_bs = min(max_requests, float(serving.max_batch_size)) / pp
    raw_tokens = min(raw_bs * (1 + isl / osl), MAX_NUM_TOKENS_CAP)
    if raw_bs < 256:
        max_bs = max(64, _round_up(raw_bs, 32))
    elif raw_bs < 1024:
        max_bs = _round_up(raw_bs, 128)
    else:
        max_bs = _round_up(raw_bs, 256)
    if raw_tokens < 4096:
        max_tokens = max(2048, _round_up(raw_tokens, 256))
    elif raw_tokens < 8192:
        max_tokens = _round_up(raw_tokens, 512)
    else:
        max_tokens = _round_up(raw_tokens, 1024)
    return max_bs, max(max_tokens, isl + max_bs)


@dataclass(frozen=True, slots=True)
class RunSchedule:
    """The run's iterations, grouped: row ``i`` stands for ``iterations[i]`` identical
    iterations (identical but for the decode context, given as their mean)."""

    iterations: FloatArray
    decode_seqs: FloatArray  # generation requests per iteration (one token each)
    prefill_requests: FloatArray  # prompts prefilled whole per iteration
    decode_context: FloatArray  # mean tokens of context a generation request attends to
    output_tokens: FloatArray  # tokens the row's iterations produce, all together
    admitted: FloatArray  # 1 where the row admits prompts

    @property
    def total_iterations(self) -> int:
        return int(self.iterations.sum())


def schedule_run(request: Request, run: BenchRun, max_batch_size: int,
                 max_num_tokens: int, kv_slots: int) -> RunSchedule:
    """Every iteration of a run of ``run.requests`` identical requests under the limits
    (module doc): ``kv_slots`` requests fit in the KV cache at once."""
    isl, osl = request.input_tokens, request.output_tokens
    limit = min(max_batch_size, kv_slots)
    if run.concurrency:
        limit = min(limit, run.concurrency)
    if limit < 1:
        raise ModelInputError("requests", "no request fits: the KV cache holds none")
    if isl > max_num_tokens:
        raise ModelInputError("max_num_tokens", f"a prompt of {isl} tokens never fits in "
                              f"{max_num_tokens} tokens per iteration (no chunked prefill)")
    # A request's last iteration comes ``last`` iterations after its context iteration:
    # osl - 1 generation iterations, plus the overlap scheduler's extra one.
    last = osl - 1 + (1 if run.overlap_extra_step else 0)
    cohorts: deque[tuple[int, int]] = deque()  # (requests, iteration of their context)
    waiting, active, started_sum, t = run.requests, 0, 0, 0
    rows: list[tuple[int, int, int, float, int, int]] = []

    def extra_at(i: int) -> int:
        """Requests making their discarded extra step in iteration ``i``."""
        if not run.overlap_extra_step or not cohorts:
            return 0
        n, s = cohorts[0]
        return n if s + osl == i else 0

    while waiting or active:
        room = min(limit - active, (max_num_tokens - active) // isl, waiting)
        if room > 0:
            ctx = active * (isl + t) - started_sum
            rows.append((1, active, room, ctx / active if active else 0.0,
                         room + active - extra_at(t), 1))
            cohorts.append((room, t))
            active += room
            waiting -= room
            started_sum += room * t
            t += 1
        else:
            if not active:
                raise ModelInputError("requests", "the run cannot start a request")
            # Nothing changes until the oldest cohort leaves after iteration s0 + last.
            n0, s0 = cohorts[0]
            end = s0 + last
            while t <= end:
                k = min(ROW_ITERATIONS, end - t + 1)
                mean_ctx = active * (isl + t + (k - 1) / 2.0) - started_sum
                made = k * active - extra_at(end) * (1 if t + k - 1 == end else 0)
                rows.append((k, active, 0, mean_ctx / active, made, 0))
                t += k
        while cohorts and cohorts[0][1] + last < t:
            n0, s0 = cohorts.popleft()
            active -= n0
            started_sum -= n0 * s0
    cols = np.asarray(rows, dtype=np.float64).T
    made_total = float(cols[4].sum())
    if made_total != run.requests * osl:  # the schedule's own invariant, not an input
        raise RuntimeError(f"schedule produced {made_total} tokens, expected "
                           f"{run.requests * osl}")
    return RunSchedule(iterations=cols[0], decode_seqs=cols[1], prefill_requests=cols[2],
                       decode_context=cols[3], output_tokens=cols[4], admitted=cols[5])


@dataclass(frozen=True, slots=True)
class RunResult:
    """A benchmark run, timed (seconds, tokens, requests)."""

    requests: int
    input_tokens: int
    output_tokens: int
    max_batch_size: int
    max_num_tokens: int
    kv_slots: int  # requests the KV cache holds at once
    iterations: int
    duration_s: float
    output_tokens_per_s: float
    mean_batch_requests: float  # generation requests per iteration, time-weighted
    peak_batch_requests: int
    first_full_batch_s: float  # until the batch first reaches its largest size
    drain_s: float  # after the last prompt is admitted
    prefill_iterations: int
    time_by_term_s: dict[str, float]

    def to_json_dict(self) -> dict[str, object]:
        return {
            "requests": self.requests, "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens, "max_batch_size": self.max_batch_size,
            "max_num_tokens": self.max_num_tokens, "kv_cache_slots_requests": self.kv_slots,
            "iterations": self.iterations, "duration_s": self.duration_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "mean_batch_requests": self.mean_batch_requests,
            "peak_batch_requests": self.peak_batch_requests,
            "first_full_batch_s": self.first_full_batch_s, "drain_s": self.drain_s,
            "prefill_iterations": self.prefill_iterations,
            "time_by_term_s": dict(self.time_by_term_s),
        }

    def to_text(self) -> str:
        return "\n".join([
            f"benchmark run: {self.requests:,} requests of {self.input_tokens} in / "
            f"{self.output_tokens} out, all waiting at t = 0 (max_batch_size "
            f"{self.max_batch_size}, max_num_tokens {self.max_num_tokens}, KV cache holds "
            f"{self.kv_slots:,})",
            f"output {self.output_tokens_per_s:,.0f} tokens/s over {self.duration_s:.2f} s "
            f"({self.iterations:,} iterations, {self.prefill_iterations:,} with prompts)",
            f"batch: mean {self.mean_batch_requests:,.0f}, peak {self.peak_batch_requests:,}"
            f" (first reached after {self.first_full_batch_s:.2f} s); drain after the last "
            f"prompt {self.drain_s:.2f} s",
        ])


def simulate_run(system: System, model: Model, request: Request, run: BenchRun,
                 serving: Serving | None = None, tp: int = 1, ep: int = 1) -> RunResult:
    """Time a benchmark run (module doc). One pipeline stage only: a run through several
    stages would also need the micro-batches' staggering, not modelled here."""
    sv = serving or Serving()
    if system.weight_streaming is not None:
        raise ModelInputError("weight_streaming", "this system streams its weights; use "
                              "netio-model wafer (netio.model.wafer)", path=system.name)
    if model.attention_heads % tp or (model.moe is not None and (
            model.moe.experts % ep or tp % ep)):
        raise ModelInputError("tp", "the layout cannot be built (heads or experts do not "
                              "split); see netio-model infer")
    bs, tokens = bench_settings(system, model, sv, request, tp, 1)
    bs = run.max_batch_size or bs
    tokens = run.max_num_tokens or tokens
    one = np.asarray([float(tp)])
    pp1 = np.ones(1)
    weights = weight_bytes_per_rank(model, sv, one, pp1)
    kv_tok = kv_bytes_per_token(model, sv.kv_dtype, one, pp1)
    free, kv_tokens = kv_cache_tokens(system, model, sv, one, weights, kv_tok,
                                      np.asarray([float(tokens)]))
    if float(free[0]) <= 0:
        raise ModelInputError("weight_dtype", f"weights do not fit: "
                              f"{float(weights[0]) / GiB:.2f} GiB per accelerator")
    blocks = int(kv_tokens[0]) // run.tokens_per_block
    per_request = -(-(request.input_tokens + request.output_tokens) // run.tokens_per_block)
    slots = blocks // per_request
    sched = schedule_run(request, run, bs, tokens, slots)

    d = sched.decode_seqs
    new = sched.prefill_requests
    isl = float(request.input_tokens)
    n = d.size
    # Padding requests are walked by the host and fill GEMM and LM-head rows like any
    # other; their context is a token or so, so the attention reads what the real
    # requests read (the mean context is scaled down to keep that product).
    d_run = padded_decode_batch(graph_batch_sizes(run, bs, tokens), d, new)
    ctx = sched.decode_context * d / np.maximum(d_run, 1.0)
    stage = iteration(system, model, sv, np.full(n, float(tp)), np.ones(n),
                      np.full(n, float(ep)), d_run, np.ones(n), new * isl, ctx,
                      np.full(n, isl * sv.causal_fraction), d_run + new)
    per_row = stage.total_s * sched.iterations
    total = float(per_row.sum())
    by_term = {k: float((getattr(stage, k) * sched.iterations).sum())
               for k in ITERATION_TERMS}
    batch = d + new
    elapsed = np.cumsum(per_row) - per_row  # start of each row
    first_full = float(elapsed[int(np.argmax(batch >= batch.max()))])
    last_admit = int(np.flatnonzero(sched.admitted)[-1])
    drain = total - float(elapsed[last_admit] + per_row[last_admit])
    return RunResult(
        requests=run.requests, input_tokens=request.input_tokens,
        output_tokens=request.output_tokens, max_batch_size=bs, max_num_tokens=tokens,
        kv_slots=slots, iterations=sched.total_iterations, duration_s=total,
        output_tokens_per_s=float(sched.output_tokens.sum()) / total,
        mean_batch_requests=float((batch * per_row).sum()) / total,
        peak_batch_requests=int(batch.max()), first_full_batch_s=first_full, drain_s=drain,
        prefill_iterations=int(sched.admitted.sum()), time_by_term_s=by_term)
