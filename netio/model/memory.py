"""Memory per accelerator, vectorised over layouts.

Parameters per rank are counted layer by layer (attention, MLP or experts, layer
norms, the embedding on the first stage). Weights, gradients and Adam state follow
Megatron's ``theoretical_memory_usage.py``: weights in the compute type, gradients in
the reduce type, and 12 bytes of fp32 master weight, momentum and variance per
parameter (8 when the weights already are fp32); ZeRO stage 1 (Megatron's distributed
optimizer) shards the optimizer state over the data-parallel ranks, stage 2 also the
gradients, stage 3 also the weights.

Activations follow Korthikanti et al., "Reducing Activation Recomputation in Large
Transformer Models" (arXiv 2205.05198), section 4, generalised to grouped-query
attention, gated MLPs and models without dropout. Per layer and micro-batch with ``s``
the sequence per rank, ``b`` the micro-batch, ``h`` hidden, ``a`` heads, ``t`` tensor
parallel and 2-byte types, their equation for a standard GPT layer is
``sbh (10 + 24/t + 5as/(ht))``; with sequence parallelism ``sbh/t (34 + 5as/h)``;
selective recomputation drops the ``5as/h`` score-matrix terms; full recomputation keeps
only the ``2sbh`` layer input. The first pipeline stage holds the activations of
``min(p, m)`` micro-batches of its ``L/p`` layers (1F1B), times ``1 + (p-1)/(pv)`` with
``v`` interleaved chunks (their section 4.2.3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from netio.model.layout import Layouts
from netio.model.schema import Attention, FloatArray, Model, Recompute


@dataclass(frozen=True, slots=True)
class MemoryArrays:
    params_per_rank: FloatArray
    weights_bytes: FloatArray
    gradients_bytes: FloatArray
    optimizer_bytes: FloatArray
    activations_bytes: FloatArray

    @property
    def total_bytes(self) -> FloatArray:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes)


def layer_params(model: Model) -> tuple[float, float]:
    """Parameters of one layer: (split by tensor parallelism, replicated)."""
    h, kvd = model.hidden_size, model.kv_heads * model.head_dim
    gate = 2 if model.ffn_gated else 1
    attn = h * (h + 2 * kvd) + (h + 2 * kvd) + h * h
    if model.moe is None:
        mlp = h * model.ffn_hidden_size * gate + model.ffn_hidden_size * gate \
            + model.ffn_hidden_size * h
    else:
        fe = model.moe.expert_ffn_hidden_size
        mlp = (model.moe.shared_experts * (h * fe * gate + fe * h))
    replicated = 4 * h + 2 * h  # two layer norms (weight, bias), two output biases
    return float(attn + mlp), float(replicated)


def expert_params(model: Model) -> float:
    """Parameters of all routed experts of one layer (0 for a dense model)."""
    if model.moe is None:
        return 0.0
    h, fe = model.hidden_size, model.moe.expert_ffn_hidden_size
    gate = 2 if model.ffn_gated else 1
    return float(model.moe.experts * (h * fe * gate + fe * h) + h * model.moe.experts)


def params_per_rank(model: Model, lay: Layouts) -> FloatArray:
    """Parameters held by one rank of the first pipeline stage (the fullest)."""
    t = lay.tensor_parallel.astype(np.float64)
    p = lay.pipeline_parallel.astype(np.float64)
    e = lay.expert_parallel.astype(np.float64)
    split, replicated = layer_params(model)
    layers = stage_layers(model, lay)
    per_layer = split / t + replicated + expert_params(model) / (e * t)
    embedding = model.vocab_size * model.hidden_size / t
    untied_head = np.where((p == 1) & (not model.tied_embeddings), embedding, 0.0)
    return layers * per_layer + embedding + untied_head


def stage_layers(model: Model, lay: Layouts) -> FloatArray:
    """Layers on the fullest pipeline rank: ``v`` chunks of ``ceil(L / (p v))`` layers
    (when the layers do not split evenly, some ranks get one layer more per chunk)."""
    chunks = (lay.pipeline_parallel * lay.interleave).astype(np.float64)
    return np.ceil(model.layers / chunks) * lay.interleave


def microbatches(lay: Layouts) -> FloatArray:
    return lay.global_batch_size / (lay.data_parallel * lay.micro_batch_size).astype(np.float64)


def activation_bytes_per_layer(model: Model, lay: Layouts, recompute: np.ndarray
                               ) -> FloatArray:
    """Bytes one layer keeps for backward, per micro-batch, on one rank."""
    el = float(lay.compute_bytes)
    t = lay.tensor_parallel.astype(np.float64)
    q = np.where(lay.sequence_parallel, t, 1.0)
    s_rank = model.sequence_length / lay.context_parallel.astype(np.float64)
    b = lay.micro_batch_size.astype(np.float64)
    h, a = float(model.hidden_size), float(model.attention_heads)
    kvd = float(model.kv_heads * model.head_dim)
    drop = 1.0 if model.dropout else 0.0
    gate = 2.0 if model.ffn_gated else 1.0
    if model.moe is None:
        ffn = float(model.ffn_hidden_size)
    else:
        m = model.moe
        ffn = m.expert_ffn_hidden_size * (m.top_k * m.capacity_factor + m.shared_experts)
    tokens = s_rank * b
    # Not split by tensor parallelism (split by sequence parallelism): the inputs of the
    # two layer norms, of QKV and of FC1, and the two dropout masks.
    replicated = tokens * h * (4 * el + 2 * drop) / q
    # Split by tensor parallelism: Q, K, V, the attention output, FC1 output(s) and the
    # activation's output.
    split = tokens * (el * (h + 2 * kvd) + el * h + el * ffn * gate + el * ffn) / t
    # The score matrix (only when it is materialised): softmax output, dropout mask and
    # dropout output.
    scores = b * a * s_rank * model.sequence_length * (el + drop * (1 + el)) / t
    scores = np.where(lay.attention == Attention.UNFUSED, scores,
                      4.0 * b * a * s_rank / t)  # flash keeps the log-sum-exp only
    none = replicated + split + scores
    selective = replicated + split + np.where(lay.attention == Attention.UNFUSED, 0.0, scores)
    full = el * tokens * h / q
    return np.where(recompute == Recompute.FULL, full,
                    np.where(recompute == Recompute.SELECTIVE, selective, none))


def activation_bytes(model: Model, lay: Layouts) -> FloatArray:
    """Activation bytes on the first pipeline stage (Korthikanti's accounting plus the
    embedding dropout mask, the logits when the first stage is also the last, and with
    full recomputation the one layer being recomputed)."""
    p = lay.pipeline_parallel.astype(np.float64)
    v = lay.interleave.astype(np.float64)
    t = lay.tensor_parallel.astype(np.float64)
    m = microbatches(lay)
    per_layer = activation_bytes_per_layer(model, lay, lay.recompute)
    in_flight = np.minimum(p, np.maximum(m, 1.0))
    interleave_factor = np.where(v > 1, 1 + (p - 1) / (p * v), 1.0)
    layers = stage_layers(model, lay)
    total = per_layer * layers * in_flight * interleave_factor
    tokens = model.sequence_length / lay.context_parallel * lay.micro_batch_size
    q = np.where(lay.sequence_parallel, t, 1.0)
    if model.dropout:
        total = total + tokens * model.hidden_size / q * in_flight
    total = total + np.where(p == 1, 4.0 * tokens * model.vocab_size / t, 0.0)
    working = activation_bytes_per_layer(model, lay, np.zeros_like(lay.recompute))
    return total + np.where(lay.recompute == Recompute.FULL, working, 0.0)


def memory(model: Model, lay: Layouts) -> MemoryArrays:
    """Memory per accelerator of the first pipeline stage, per layout."""
    params = params_per_rank(model, lay)
    el, gb = float(lay.compute_bytes), float(lay.grad_bytes)
    shard = (lay.data_parallel * lay.context_parallel).astype(np.float64)
    z = lay.zero_stage
    weights = params * el / np.where(z >= 3, shard, 1.0)
    grads = params * gb / np.where(z >= 2, shard, 1.0)
    state = 8.0 if el >= 4 else 12.0
    optimizer = params * state / np.where(z >= 1, shard, 1.0)
    return MemoryArrays(params, weights, grads, optimizer, activation_bytes(model, lay))
