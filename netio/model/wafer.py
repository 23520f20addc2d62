"""Wafer-scale execution: weight-streaming training and SRAM-resident inference, and a
side-by-side comparison with a GPU cluster on the same model.

A system with a ``[weight_streaming]`` table (Cerebras CS-3 style: the compute has large
on-chip SRAM and no HBM; the weights live in an external memory service, MemoryX, and
stream over the network, SwarmX, every step) is modelled here; the GPU step model
refuses it.

**Training in weight-streaming mode** (Cerebras, "Weight Streaming" white paper; the
execution model Argonne's ALCF documentation describes), ``N`` systems in data parallel,
each taking ``B/N`` sequences of the global batch. For each layer ``l`` with ``P_l``
parameters (``w_l = P_l e`` bytes in the compute type):

* forward: the weights stream in (``w_l / BW`` plus the tree latency), and the wafer
  computes ``2 T P_l`` FLOPs (``T`` tokens on the system) plus attention;
* backward: the weights stream in again, the wafer computes ``4 T P_l`` (plus a
  recomputed forward when the activations do not fit in SRAM), and the gradients stream
  out (``w_l / BW``) to be reduced in the SwarmX tree; in and out share the full-duplex
  system I/O, so a layer's backward takes the longest of compute, weights in and
  gradients out;
* the weight fetch of the next layer overlaps the compute of this one, so a layer costs
  ``max(compute, stream)``, except at the step boundaries: the first layer's weights
  before the forward, and the last gradient's reduction (and the optimizer's update on
  MemoryX) after the backward, are exposed;
* the SwarmX tree broadcasts weights to and reduces gradients from ``N`` systems in
  ``ceil(log_f N)`` levels (fan-out ``f``), each level adding the stream latency: the
  broadcast replicates in the switches, so bandwidth per system does not shrink with
  ``N``, but latency grows with ``log N``;
* when the batch's activations do not fit in SRAM the step runs as gradient accumulation
  over micro-batches, and every micro-batch streams all weights again.

The step is then said to be bound by the wafer (compute), by weight streaming
(bandwidth), or by the tree (latency), whichever term is largest.

**Inference with weights resident in SRAM**: the model is spread layer by layer over as
many wafers as its weights (and the KV cache of the batch) need; layers are pipelined
across wafers, activations cross the system I/O between them. With ``W`` wafers and
``b`` sequences in flight as ``W`` micro-batches, a wafer's stage time for its ``b/W``
tokens is:

* the roofline of its layers (SRAM bandwidth for weights and KV cache, compute);
* the on-wafer dataflow latency: on a 2D mesh of cores (four neighbours each) a layer
  holds a region of ``1/k`` of the wafer (``k`` layers per wafer), whose side is
  ``1/sqrt(k)`` of the wafer's, so a traversal of the region takes
  ``scaleup_latency_s / sqrt(k)`` (``scaleup_latency_s``: one traversal of the whole
  wafer). A decoded token crosses its layer's region ``WAFER_TRAVERSALS_PER_LAYER``
  times one after the other (each matrix-vector stage broadcasts its input along one
  axis and reduces partial sums along the other; the RMSNorms reduce and broadcast; the
  activation moves on to the next layer's region);
* the hop to the next wafer over the system I/O: the NIC latency plus ``b/W`` tokens of
  ``h`` activations over all the system's ports at their efficiency for that size (the
  last wafer's hop returns the sampled token to the first).

The time per output token is ``W`` stage times, so tokens/s per user fall and tokens/s of
the system rise with the batch. This is still an upper bound: the mesh latency and the
wafer's achieved efficiencies are not published (the preset lists them under
``unpublished`` and every result names the ones it used), and Cerebras' published rates
(Llama 3.1 8B at 1,800 and 70B at 450 tokens/s per user at launch, 16-bit weights) are
several times below it; tests/model/test_model_wafer.py checks the bound holds and
records the ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from netio.errors import ModelInputError
from netio.model.inference import Request, Serving, kv_bytes_per_token, roofline_s
from netio.model.memory import expert_params, layer_params
from netio.model.schema import DTYPE_BYTES, Execution, Model, System, WeightStreaming
from netio.model.training import train

#: Activation bytes kept per token and layer for backward, in units of ``h`` bytes:
#: Korthikanti et al. 2022 (arXiv 2205.05198) eq. 2 with no tensor parallelism and the
#: score matrix fused away (FlashAttention): ``34 s b h`` bytes per layer, i.e. 34 h per
#: token. With recomputation only the layer input, 2 h bytes per token, is kept.
ACTIVATION_BYTES_PER_TOKEN_H = 34.0
RECOMPUTE_BYTES_PER_TOKEN_H = 2.0

#: Dependent crossings of a layer's region per decoded token (module doc): a broadcast
#: and a reduction for each of the six matrix-vector stages (QKV, the scores q.K, the
#: weighted sum A.V, the output projection, FC1 with its gate, FC2): 12; a reduction and
#: a broadcast for each of the two RMSNorms: 4; the move to the next layer's region: 1.
WAFER_TRAVERSALS_PER_LAYER = 17

#: The system-file keys each wafer computation reads (to name the unpublished ones).
TRAIN_INPUTS = frozenset({
    "accelerator.memory_bytes", "accelerator.matmul_efficiency_by_flops",
    "accelerator.peak_flops_per_s", "accelerator.memory_bandwidth_bytes_per_s",
    "weight_streaming.stream_bandwidth_bytes_per_s", "weight_streaming.stream_latency_s",
    "weight_streaming.reduction_tree_fanout",
    "weight_streaming.optimizer_on_memory_service"})
INFER_INPUTS = frozenset({
    "accelerator.memory_bytes", "accelerator.matmul_efficiency_by_flops",
    "accelerator.peak_flops_per_s", "accelerator.memory_bandwidth_bytes_per_s",
    "accelerator.memory_efficiency_by_bytes", "node.scaleup_latency_s", "node.nics",
    "node.nic_bandwidth_bits_per_s", "node.nic_latency_s", "node.nic_efficiency_by_bytes"})


def unpublished_inputs(system: System, reads: frozenset[str]) -> tuple[str, ...]:
    """The keys among ``reads`` that the system file marks as having no public source."""
    return tuple(k for k in system.unpublished if k in reads)


def _unpublished_note(keys: tuple[str, ...]) -> str:
    return ("" if not keys else
            f"; depends on values no public source gives: {', '.join(keys)}")


def _streaming(system: System) -> WeightStreaming:
    if system.weight_streaming is None:
        raise ModelInputError("weight_streaming", "this system has no [weight_streaming] "
                              "table: use the GPU models (train, infer)", path=system.name)
    return system.weight_streaming


def tree_levels(systems: int, fanout: int) -> int:
    """Levels of a broadcast/reduce tree of ``fanout`` over ``systems`` leaves."""
    return 0 if systems <= 1 else math.ceil(math.log(systems) / math.log(fanout) - 1e-12)


def _layer_flops_per_token(model: Model) -> tuple[float, float]:
    """Forward FLOPs per token of one layer: (weights, attention over the sequence)."""
    split, _ = layer_params(model)
    active = split
    if model.moe is not None:
        gate = 2 if model.ffn_gated else 1
        m = model.moe
        active += m.top_k * (model.hidden_size * m.expert_ffn_hidden_size * (gate + 1))
    attn = 4.0 * model.sequence_length / 2 * model.hidden_size  # causal: half the scores
    return 2.0 * active, attn


@dataclass(frozen=True, slots=True)
class WaferTrainResult:
    system: str
    model: str
    systems: int
    global_batch_size: int
    micro_batches: int
    recompute: bool
    step_s: float
    tokens_per_s: float
    mfu: float
    breakdown_s: dict[str, float]
    bound: str
    tree_levels: int
    sentence: str
    unpublished_inputs: tuple[str, ...] = ()

    def to_json_dict(self) -> dict[str, object]:
        return {"system": self.system, "model": self.model, "systems": self.systems,
                "global_batch_size": self.global_batch_size,
                "micro_batches": self.micro_batches, "recompute": self.recompute,
                "step_s": self.step_s, "tokens_per_s": self.tokens_per_s,
                "mfu_ratio": self.mfu, "breakdown_s": dict(self.breakdown_s),
                "bound": self.bound, "tree_levels": self.tree_levels,
                "explanation": self.sentence,
                "unpublished_inputs": list(self.unpublished_inputs)}


def train_weight_streaming(system: System, model: Model, systems: int,
                           global_batch_size: int, dtype: str = "bf16") -> WaferTrainResult:
    """One training step in weight-streaming mode on ``systems`` wafers (module doc)."""
    ws = _streaming(system)
    if systems < 1 or global_batch_size < systems:
        raise ModelInputError("systems", "need 1 <= systems <= global batch size")
    acc = system.accelerator
    el = float(DTYPE_BYTES[dtype])
    h = float(model.hidden_size)
    seqs = math.ceil(global_batch_size / systems)
    split, replicated = layer_params(model)
    p_layer = split + replicated + expert_params(model)
    w_layer = p_layer * el
    emb = model.vocab_size * h * (1 if model.tied_embeddings else 2) * el
    weights = model.layers * w_layer + emb
    # SRAM holds activations (weights pass through; a layer's worth is resident at once).
    sram = acc.memory_bytes - 2 * w_layer
    full_per_seq = ACTIVATION_BYTES_PER_TOKEN_H * h * model.sequence_length * model.layers
    rec_per_seq = (RECOMPUTE_BYTES_PER_TOKEN_H * h * model.sequence_length * model.layers
                   + ACTIVATION_BYTES_PER_TOKEN_H * h * model.sequence_length)
    recompute = seqs * full_per_seq > sram
    per_seq = rec_per_seq if recompute else full_per_seq
    mb_seqs = max(1, min(seqs, int(sram // per_seq)))
    micro = math.ceil(seqs / mb_seqs)
    tokens_mb = float(mb_seqs * model.sequence_length)

    levels = tree_levels(systems, ws.reduction_tree_fanout)
    lat = levels * ws.stream_latency_s + ws.stream_latency_s
    stream = lat + w_layer / ws.stream_bandwidth_bytes_per_s
    fpt_w, fpt_a = _layer_flops_per_token(model)
    f_fwd = tokens_mb * (fpt_w + fpt_a)
    peak = acc.peak(dtype)

    def compute(flops: float) -> float:
        return float(flops / (peak * acc.matmul_efficiency.at(flops)[()]))

    c_fwd = compute(f_fwd)
    c_bwd = compute(2 * f_fwd) + (c_fwd if recompute else 0.0)
    layer_fwd = max(c_fwd, stream)
    layer_bwd = max(c_bwd, stream)  # weights in and gradients out share full duplex
    head = compute(tokens_mb * 2 * h * model.vocab_size) * 3
    per_micro = model.layers * (layer_fwd + layer_bwd) + head + stream  # first fetch
    # After the last micro-batch: the last gradients' reduction and the optimizer update
    # on the memory service (hidden when it runs there as gradients arrive; else the wafer
    # would also read and write the optimizer state).
    tail = stream + (0.0 if ws.optimizer_on_memory_service
                     else weights * 8 / acc.memory_bandwidth_bytes_per_s)
    step = micro * per_micro + tail
    wafer_s = micro * (model.layers * (c_fwd + c_bwd) + head)
    stream_s = micro * model.layers * 2 * (w_layer / ws.stream_bandwidth_bytes_per_s)
    tree_s = micro * (2 * model.layers + 1) * lat + lat
    exposed_stream = step - wafer_s
    breakdown = {"wafer_compute": wafer_s, "exposed_weight_streaming": max(exposed_stream, 0.0),
                 "weight_streaming_total": stream_s, "tree_latency_total": tree_s}
    terms = {"the wafer (compute)": wafer_s, "weight streaming (bandwidth)": stream_s,
             "the SwarmX tree (latency)": tree_s}
    bound = max(terms, key=lambda k: terms[k])
    tokens = global_batch_size * model.sequence_length
    model_flops = tokens * model.layers * 3 * (fpt_w + fpt_a) + tokens * 6 * h * model.vocab_size
    mfu = model_flops / (step * systems * peak)
    sentence = (f"bound by {bound}: per layer and micro-batch the wafer computes "
                f"{c_fwd * 1e3:.3g} ms forward and {c_bwd * 1e3:.3g} ms backward while its "
                f"{w_layer / 1e9:.3g} GB of weights stream in {stream * 1e3:.3g} ms "
                f"({levels} tree level{'s' if levels != 1 else ''} of "
                f"{ws.stream_latency_s * 1e6:.3g} us); {micro} micro-batch"
                f"{'es' if micro != 1 else ''} of {mb_seqs} sequences"
                f"{' with recomputation' if recompute else ''}")
    unpub = unpublished_inputs(system, TRAIN_INPUTS)
    return WaferTrainResult(system.name, model.name, systems, global_batch_size, micro,
                            recompute, step, tokens / step, mfu, breakdown,
                            bound.split(" (")[0].removeprefix("the "), levels,
                            sentence + _unpublished_note(unpub), unpub)


@dataclass(frozen=True, slots=True)
class WaferInferRow:
    batch: int
    feasible: bool
    tpot_s: float
    tokens_per_s_per_user: float
    system_tokens_per_s: float


@dataclass(frozen=True, slots=True)
class WaferInferResult:
    system: str
    model: str
    wafers: int
    weights_bytes: float
    rows: tuple[WaferInferRow, ...]
    unpublished_inputs: tuple[str, ...] = ()

    @property
    def note(self) -> str:
        """What the numbers rest on, in one line (empty when every input is sourced)."""
        return _unpublished_note(self.unpublished_inputs).removeprefix("; ")

    def to_json_dict(self) -> dict[str, object]:
        return {"system": self.system, "model": self.model, "wafers": self.wafers,
                "weights_bytes": self.weights_bytes,
                "unpublished_inputs": list(self.unpublished_inputs),
                "batches": [{"batch": r.batch, "feasible": r.feasible,
                             "time_per_output_token_s": r.tpot_s,
                             "tokens_per_s_per_user": r.tokens_per_s_per_user,
                             "system_tokens_per_s": r.system_tokens_per_s} for r in self.rows]}


def infer_sram_resident(system: System, model: Model, request: Request, batches: list[int],
                        serving: Serving | None = None) -> WaferInferResult:
    """Decode with the weights resident in SRAM across wafers (module doc)."""
    _streaming(system)  # a wafer system, not a GPU one
    sv = serving or Serving(weight_dtype="bf16", kv_dtype="bf16")
    acc = system.accelerator
    wb = float(DTYPE_BYTES[sv.weight_dtype])
    ab = float(DTYPE_BYTES[sv.activation_dtype])
    h = float(model.hidden_size)
    split, replicated = layer_params(model)
    p_layer = split + replicated + expert_params(model)
    emb = model.vocab_size * h * (1 if model.tied_embeddings else 2)
    weights = (model.layers * p_layer + emb) * wb
    kv_tok = float(kv_bytes_per_token(model, sv.kv_dtype)[()])
    ctx = request.input_tokens + request.output_tokens / 2
    rows = []
    wafers_min = math.ceil(weights / acc.memory_bytes)
    fpt_w, _ = _layer_flops_per_token(model)
    out = system.node.scale_out
    for b in batches:
        kv = b * (request.input_tokens + request.output_tokens) * kv_tok
        wafers = max(wafers_min, math.ceil((weights + kv) / acc.memory_bytes))
        layers = math.ceil(model.layers / wafers)
        mb = max(b / wafers, 1.0)
        flops = np.asarray([layers * mb * (fpt_w + 4 * ctx * h)])
        bytes_ = np.asarray([layers * (p_layer * wb + mb * ctx * kv_tok / model.layers)])
        stage = float(roofline_s(system, sv.activation_dtype, 1.0, flops, bytes_)[0])
        # The hop to the next wafer: mb tokens of activations over all the system's ports.
        act = mb * h * ab
        hop = out.alpha_s + act * out.beta_s_per_byte / system.node.nics / float(
            out.efficiency.at(act / system.node.nics)[()])
        head = float(roofline_s(system, sv.activation_dtype, 1.0,
                                np.asarray([2 * mb * h * model.vocab_size]),
                                np.asarray([h * model.vocab_size * wb]))[0]) / wafers
        # On-wafer dataflow: each layer's region is 1/layers of the wafer (module doc).
        traversal = system.node.scale_up.alpha_s / math.sqrt(layers)
        on_wafer = layers * WAFER_TRAVERSALS_PER_LAYER * traversal
        tpot = wafers * (stage + head + hop + on_wafer)
        rows.append(WaferInferRow(b, True, tpot, 1.0 / tpot, b / tpot))
    return WaferInferResult(system.name, model.name, wafers_min, weights, tuple(rows),
                            unpublished_inputs(system, INFER_INPUTS))


# --- GPU against wafer ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Comparison:
    model: str
    gpu_system: str
    wafer_system: str
    rows: tuple[tuple[str, float, float, bool], ...]  # (metric, gpu, wafer, lower wins)

    def to_json_dict(self) -> dict[str, object]:
        return {"model": self.model, "gpu_system": self.gpu_system,
                "wafer_system": self.wafer_system,
                "metrics": [{"metric": m, "gpu": g, "wafer": w, "lower_is_better": low}
                            for m, g, w, low in self.rows]}

    def to_text(self) -> str:
        lines = [f"{self.model}: {self.gpu_system} against {self.wafer_system}",
                 f"{'metric':<44}{'GPU cluster':>16}{'wafer-scale':>16}{'wins':>8}"]
        for m, g, w, lower_better in self.rows:
            win = ("GPU" if (g < w) == lower_better else "wafer") if g != w else "tie"
            lines.append(f"{m:<44}{g:>16.4g}{w:>16.4g}{win:>8}")
        return "\n".join(lines)


def compare(model: Model, gpu: System, gpu_execution: Execution, wafer: System,
            wafer_systems: int, request: Request, batch: int,
            gpu_price_per_hour: float = 0.0, wafer_price_per_hour: float = 0.0,
            gpu_serving_tp: int = 8) -> Comparison:
    """The same model, the same global batch and the same serving request on a GPU
    cluster and on wafer-scale systems: step time, tokens/s, and cost per step or per
    million tokens when prices (per accelerator-hour, per system-hour) are given."""
    from netio.model.inference import infer

    g = train(gpu, model, gpu_execution)
    w = train_weight_streaming(wafer, model, wafer_systems, gpu_execution.global_batch_size,
                               gpu_execution.compute_dtype)
    gi = infer(gpu, model, request, Serving(weight_dtype="bf16", kv_dtype="bf16"),
               tp=gpu_serving_tp, concurrency=batch)
    if not gi.feasible:
        raise ModelInputError("gpu_serving_tp", f"serving {model.name} in bf16 at batch "
                              f"{batch} on {gpu_serving_tp} x {gpu.name}: "
                              f"{gi.infeasible_reason}", path=gpu.name)
    wi = infer_sram_resident(wafer, model, request, [batch]).rows[0]
    n_gpu = gpu_execution.accelerators
    wafers_serving = infer_sram_resident(wafer, model, request, [batch]).wafers
    rows: list[tuple[str, float, float, bool]] = [
        ("train_accelerators_count", float(n_gpu), float(wafer_systems), True),
        ("train_step_s", g.step_s, w.step_s, True),
        ("train_tokens_per_s", g.tokens_per_s, w.tokens_per_s, False),
        (f"serve_batch_{batch}_tokens_per_s_per_user", gi.output_tokens_per_s_per_user,
         wi.tokens_per_s_per_user, False),
        (f"serve_batch_{batch}_system_tokens_per_s", gi.output_tokens_per_s,
         wi.system_tokens_per_s, False),
        ("serve_accelerators_count", float(gpu_serving_tp), float(wafers_serving), True),
    ]
    if gpu_price_per_hour > 0 and wafer_price_per_hour > 0:
        rows.append(("train_cost_per_step_usd", g.step_s * n_gpu * gpu_price_per_hour / 3600,
                     w.step_s * wafer_systems * wafer_price_per_hour / 3600, True))
        rows.append(("serve_cost_per_million_tokens_usd",
                     gpu_serving_tp * gpu_price_per_hour / 3600 / gi.output_tokens_per_s * 1e6,
                     wafers_serving * wafer_price_per_hour / 3600 / wi.system_tokens_per_s
                     * 1e6, True))
    return Comparison(model.name, gpu.name, wafer.name, tuple(rows))
