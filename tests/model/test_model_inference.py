"""The inference model: KV-cache sizes, serving limits, speculation, disaggregation.

Expected values come from the model shapes' publications and closed forms stated in the
papers cited, never from netio.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from netio.errors import ModelInputError
from netio.model import load_model, load_system
from netio.model.inference import (
    InferLayouts,
    Request,
    Serving,
    Speculation,
    expected_tokens,
    infer,
    iteration,
    kv_bytes_per_token,
    kv_transfer_s,
    padded_rows,
    serve,
    speedup_vs_batch,
)
from netio.model.schema import Curve

H100 = "dgx-h100"


def test_kv_bytes_per_token_gqa_mqa_and_dtype() -> None:
    # Llama 3 8B: 32 layers, 8 KV heads of 128 (arXiv 2407.21783 Table 3): K and V in
    # bf16 are 2 * 32 * 8 * 128 * 2 = 131,072 bytes per token (128 KiB), 64 KiB in fp8.
    m8 = load_model("llama3-8b")
    assert float(kv_bytes_per_token(m8, "bf16")[()]) == 131072
    assert float(kv_bytes_per_token(m8, "fp8")[()]) == 65536
    # Llama 3 70B: 80 layers, 8 KV heads: 327,680 bytes (320 KiB) per token in bf16.
    assert float(kv_bytes_per_token(load_model("llama3-70b"), "bf16")[()]) == 327680
    # Tensor parallel 2 halves a rank's share; beyond the 8 KV heads a rank keeps one.
    assert float(kv_bytes_per_token(m8, "bf16", 2)[()]) == 65536
    assert float(kv_bytes_per_token(m8, "bf16", 16)[()]) == 131072 / 8
    # Pipeline parallel 4 leaves 8 of the 32 layers on a rank.
    assert float(kv_bytes_per_token(m8, "bf16", 1, 4)[()]) == 131072 / 4


def test_expected_tokens_is_leviathan_theorem_3_8() -> None:
    # (1 - a^(g+1)) / (1 - a): a = 0 gives the one bonus token, a -> 1 gives g + 1, and
    # a = 0.8, g = 4: (1 - 0.8^5) / 0.2 = 3.3616 (Leviathan et al. 2023, Theorem 3.8).
    assert float(expected_tokens(0.0, 4)[()]) == pytest.approx(1.0)
    assert float(expected_tokens(0.8, 4)[()]) == pytest.approx((1 - 0.8 ** 5) / 0.2)
    assert float(expected_tokens(0.9999999, 3)[()]) == pytest.approx(4.0, rel=1e-5)
    assert float(expected_tokens(1.0, 3)[()]) == 4.0


def test_largest_batch_fits_and_one_more_does_not() -> None:
    system, model = load_system(H100), load_model("llama3-70b")
    req = Request(1000, 1000)
    best = infer(system, model, req, tp=2)
    assert best.feasible
    # Capacity: KV tokens over the tokens reserved per request.
    assert best.max_concurrency == pytest.approx(
        best.kv_capacity_tokens // 2000, abs=0.5)
    over = infer(system, model, req, tp=2, concurrency=int(best.max_concurrency) + 1)
    assert not over.feasible
    assert "KV cache" in over.infeasible_reason
    # 70B fp8 weights (~70 GB) do not fit one 80 GB H100 with any cache.
    bf16 = infer(system, model, req, Serving(weight_dtype="bf16"), tp=1)
    assert not bf16.feasible and "weights" in bf16.infeasible_reason


def test_decode_is_memory_bound_at_batch_1_and_compute_bound_at_large_batch() -> None:
    system, model = load_system(H100), load_model("llama3-8b")
    req = Request(128, 128)
    one = infer(system, model, req, concurrency=1)
    # At batch 1 an iteration reads the ~8 GB of fp8 weights (plus the bf16 LM head) at
    # most at 3.35 TB/s: at least 2.4 ms, and tokens/s per user below 1 / 2.4 ms.
    assert one.tpot_s > 8.0e9 / 3.35e12
    many = infer(system, model, req, concurrency=2048)
    # Throughput grows with the batch but far less than linearly once compute-bound.
    assert many.output_tokens_per_s > 20 * one.output_tokens_per_s
    assert many.output_tokens_per_s < 2048 * one.output_tokens_per_s / 4
    assert many.bottleneck == "gemm"


def test_mixture_of_experts_reads_only_touched_experts() -> None:
    system, moe = load_system(H100), load_model("mixtral-8x7b")
    req = Request(128, 2048)  # long outputs: an iteration is almost only decode
    # Mixtral 8x7B has ~46.7 B parameters, ~12.9 B active per token (arXiv 2401.04088,
    # section 2): at batch 1 a decode step reads ~2/8 of the expert weights, so it is much
    # faster than reading all 46.7 B in fp8 (>= 14 ms at 3.35 TB/s) would allow.
    one = infer(system, moe, req, tp=1, concurrency=1)
    assert one.tpot_s < 46.7e9 / 3.35e12 / 2
    assert one.tpot_s > 12.9e9 / 3.35e12
    # Expert parallelism must divide the experts and the tensor-parallel group.
    assert not infer(system, moe, req, tp=4, ep=3).feasible


def test_speculation_speedup_shrinks_with_batch() -> None:
    system, model = load_system(H100), load_model("llama3-8b")
    req = Request(128, 512)
    spec = Speculation(acceptance_rate=0.8, draft=load_model("llama3-8b"), cost_ratio=0.0)
    # A cheap draft (cost ratio c = 0.05 of a target decode step), alpha = 0.8, gamma 4.
    cheap = Speculation(acceptance_rate=0.8, cost_ratio=0.05)
    # The GPU side of the batch effect: without host time per request (which makes large
    # plain-decode batches host-bound, and speculation then saves host iterations).
    gpu_only = Serving(iteration_overhead_s=0.0, host_per_request_s=0.0)
    s = speedup_vs_batch(system, model, req, gpu_only, cheap, 4, [1, 16, 256, 1024])
    assert s[0] > 2.0  # memory-bound verification costs ~one step: ~3.36 / (1 + 4 c)
    assert s[0] < float(expected_tokens(0.8, 4)[()])
    assert s[0] > s[1] > s[2] > s[3]
    assert s[3] < 1.2  # compute-bound at large batch: little left
    # A draft as large as the target (c ~ 1 per drafted token) never pays.
    same = speedup_vs_batch(system, model, req, Serving(), spec, 4, [1, 64])
    assert max(same) < 1.0


def test_mean_accepted_length_input_for_tree_drafts() -> None:
    system, model = load_system(H100), load_model("llama3-8b")
    req = Request(128, 512)
    lay = InferLayouts.one(concurrency=1, draft_tokens=6)
    r = serve(system, model, Serving(), req, lay,
              Speculation(mean_accepted_tokens=3.5, cost_ratio=0.02))
    assert float(r.accepted_tokens_per_step[0]) == 3.5
    with pytest.raises(ModelInputError, match="mean_accepted_tokens"):
        Speculation(mean_accepted_tokens=0.5)


def test_tree_verification_tokens_and_their_logits() -> None:
    # A tree draft verifies its nodes plus the root in one pass (EAGLE: 5 draft passes, 26
    # tokens), and the verification needs the logits of every verified token: at 64
    # sequences the LM head does at least 2 x (64 x 26) x h x V FLOPs (Llama 3 8B: h 4096,
    # V 128256) at the H100's dense bf16 peak of 989 TFLOPS (datasheet), where one logit
    # per sequence would be 26 times less.
    system, model = load_system(H100), load_model("llama3-8b")
    req = Request(128, 512)
    lay = InferLayouts.one(concurrency=64, draft_tokens=5)
    tree = serve(system, model, Serving(), req, lay,
                 Speculation(mean_accepted_tokens=3.8, cost_ratio=0.02, verify_tokens=26))
    assert float(tree.stage.lm_head_s[0]) >= 2 * 64 * 26 * 4096 * 128256 / 989e12
    chain = serve(system, model, Serving(), req, lay,
                  Speculation(mean_accepted_tokens=3.8, cost_ratio=0.02))
    assert float(tree.stage.total_s[0]) > float(chain.stage.total_s[0])
    # The KV cache reserves the verified tokens beyond the request: 25 more than isl + osl.
    assert float(tree.kv_capacity_tokens[0]) == float(chain.kv_capacity_tokens[0])
    assert float(tree.max_concurrency[0]) == float(tree.kv_capacity_tokens[0]) // (128 + 512 + 25)
    with pytest.raises(ModelInputError, match="verify_tokens"):
        Speculation(verify_tokens=1)


def test_disaggregated_kv_transfer_over_the_nic() -> None:
    system, model = load_system(H100), load_model("llama3-70b")
    req = Request(4096, 256)
    r = infer(system, model, req, tp=2, disaggregate=True)
    assert r.disaggregated is not None
    # 4096 tokens x 160 KiB (fp8 KV of Llama 3 70B) = 640 MiB, sent by 2 ranks, each
    # over its own 400 Gb/s NIC: at least 335.5 MB / 50 GB/s = 6.7 ms.
    assert r.disaggregated["kv_transfer_bytes"] == 4096 * 163840
    assert r.disaggregated["kv_transfer_s"] >= 4096 * 163840 / 2 / 50e9
    assert r.disaggregated["kv_transfer_s"] < 4 * 4096 * 163840 / 2 / 50e9
    # A faster network moves it faster (a fabric profile-calibrated link is the same path).
    assert kv_transfer_s(system, model, Serving(), req, 4, 1) < r.disaggregated["kv_transfer_s"]


def test_vectorised_serving_equals_one_at_a_time() -> None:
    system, model = load_system(H100), load_model("llama3-70b")
    req = Request(500, 2000)
    tps, pps, concs = [1, 2, 4, 8, 2], [1, 1, 2, 1, 4], [0, 64, 0, 256, 32]
    lay = InferLayouts(*(np.asarray(x, dtype=np.int64) for x in (
        tps, pps, [1] * 5, concs, [0] * 5)))
    many = serve(system, model, Serving(), req, lay)
    for i in range(5):
        one = infer(system, model, req, tp=tps[i], pp=pps[i], concurrency=concs[i])
        assert one.output_tokens_per_s == float(many.output_tokens_per_s[i])
        assert one.tpot_s == float(many.tpot_s[i])


def test_unfused_attention_pays_for_the_score_matrix() -> None:
    system, model = load_system(H100), load_model("llama3-8b")
    req = Request(8192, 16)  # prefill-heavy: attention over long prompts
    fused = infer(system, model, req, concurrency=8)
    unfused = infer(system, model, req, Serving(attention_fused=False), concurrency=8)
    assert unfused.iteration_breakdown_s["attention_s"] > fused.iteration_breakdown_s[
        "attention_s"]
    assert unfused.iteration_breakdown_s["gemm_s"] == fused.iteration_breakdown_s["gemm_s"]


def test_no_room_for_one_request_is_infeasible() -> None:
    # Llama 3 70B in fp8 (~70 GB) leaves an 80 GB H100 a few GB: a 1M-token request's
    # cache (160 KiB per token, ~164 GB) does not fit even once.
    r = infer(load_system(H100), load_model("llama3-70b"), Request(1_000_000, 10))
    assert not r.feasible and "KV cache" in r.infeasible_reason


def test_gemm_rows_pad_to_the_warpgroup_tile() -> None:
    # PTX ISA 8.0, wgmma.mma_async: every shape is m64nNk*, N a multiple of 8. A GEMM
    # over 257 tokens runs 5 tiles of 64 rows (320); below 32 tokens the operands are
    # swapped and tokens pad to 8.
    sv = Serving()
    got = padded_rows(sv, np.asarray([0.0, 1.0, 20.0, 64.0, 65.0, 257.0, 8192.0]))
    assert list(got) == [0.0, 8.0, 24.0, 64.0, 128.0, 320.0, 8192.0]
    assert list(padded_rows(Serving(gemm_row_tile=1, gemm_swap_tile_rows=1),
                            np.asarray([257.0]))) == [257.0]
    with pytest.raises(ModelInputError):
        Serving(gemm_row_tile=0)


def test_host_bound_iteration_lasts_the_host_walk() -> None:
    # An engine whose host spends 1 ms per request per iteration (far above any GPU time
    # of Llama 3 8B on an H100 at 512 requests) runs one iteration per 512 + 512 * 128 /
    # 128 / 128 = 516 request walks (decodes plus the prompts started): 0.516 s per token.
    system, model = load_system(H100), load_model("llama3-8b")
    slow_host = Serving(host_per_request_s=1e-3)
    r = infer(system, model, Request(128, 128), slow_host, concurrency=512)
    assert r.tpot_s == pytest.approx(1e-3 * (512 + 512 / 128), rel=1e-9)
    assert r.bottleneck == "overhead"
    # When the host keeps up, only the exposed part remains on top of the GPU's work.
    fast = infer(system, model, Request(128, 128), Serving(host_per_request_s=0.0),
                 concurrency=8)
    assert fast.iteration_breakdown_s["overhead_s"] == Serving().iteration_overhead_s


def test_unfused_prefill_products_run_at_their_measured_rate() -> None:
    # Spec: an unfused prefill of P tokens attending c each does 4 P c a d / tp FLOPs,
    # half in Q K^T and half in P V, each at its own flat rate (e_s, e_v) when the system
    # gives one below the matmul rate: (F/2) / (peak e_s) + (F/2) / (peak e_v) per layer.
    # Decode keeps the matmul rate; fused prefill runs at most at FlashAttention-3's
    # forward rate for the prompt (arXiv 2407.08608, Figure 5c, H100, head dim 128:
    # 638 TFLOPS of 989.4 at 4k tokens; a prompt attending 2048 on average is 4096 long).
    base = load_system("dgx-a100-80gb")
    acc = dataclasses.replace(base.accelerator, matmul_efficiency=Curve((1.0,), (0.8,)),
                              memory_bandwidth_bytes_per_s=1e18,
                              attention_score_efficiency=Curve((1.0,), (0.25,)),
                              attention_over_value_efficiency=Curve((1.0,), (0.4,)))
    system = dataclasses.replace(base, accelerator=acc)
    model = load_model("llama3-8b")
    one = np.array([1.0])
    tokens, ctx = 4096.0, 2048.0

    def attention_s(serving: Serving, prefill: float, decode: float) -> float:
        it = iteration(system, model, serving, one, one, one, np.array([decode]), one,
                       np.array([prefill]), np.array([ctx]), np.array([ctx]), one)
        return float(it.attention_s[0])

    flops = 4 * tokens * ctx * model.attention_heads * model.head_dim
    peak = system.accelerator.peak("fp16")
    unfused = Serving(weight_dtype="fp16", kv_dtype="fp16", activation_dtype="fp16",
                      attention_fused=False)
    assert attention_s(unfused, tokens, 0.0) == pytest.approx(
        model.layers * (flops / 2 / (peak * 0.25) + flops / 2 / (peak * 0.4)), rel=1e-9)
    fused = dataclasses.replace(unfused, attention_fused=True)
    assert attention_s(fused, tokens, 0.0) == pytest.approx(
        model.layers * flops / (peak * 638.0 / 989.4), rel=1e-9)
    unlimited = dataclasses.replace(fused, fused_prefill_efficiency=Curve((1.0,), (1.0,)))
    assert attention_s(unlimited, tokens, 0.0) == pytest.approx(
        model.layers * flops / (peak * 0.8), rel=1e-9)
    decode_flops = 4 * 8 * ctx * model.attention_heads * model.head_dim
    assert attention_s(unfused, 0.0, 8.0) == pytest.approx(
        model.layers * decode_flops / (peak * 0.8), rel=1e-9)
