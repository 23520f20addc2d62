"""The benchmark-run simulation (netio.model.serving_run): trtllm-bench's settings, the
scheduler's iterations, CUDA-graph padding.

Expected values are worked out by hand from the rules the sources state (written out at
each test), not taken from the code: TensorRT-LLM tensorrt_llm/bench/build/tuning.py and
bench/benchmark/utils/general.py for the settings; the capacity (GUARANTEED_NO_EVICT) and
micro-batch schedulers, "the context iteration yields the first token" and the overlap
scheduler's "one extra decoding step" for the iterations; model_engine.py
``_filter_cuda_graph_batch_sizes`` / ``_maybe_pad_batch`` for the padding.
"""

from __future__ import annotations

import numpy as np
import pytest

from netio.errors import ModelInputError
from netio.model import load_model, load_system
from netio.model.inference import Request, Serving, infer
from netio.model.serving_run import (
    BenchRun,
    bench_settings,
    graph_batch_sizes,
    padded_decode_batch,
    schedule_run,
    simulate_run,
)


@pytest.mark.parametrize(("isl", "osl", "max_bs", "max_tokens"), [
    # Llama 3.1 8B FP8 on one H100 (the preset's 80 GiB): 8.03e9 parameters at 1 byte is
    # 7.48 GiB, so (80 - 7.48) x 0.90 = 65.27 GiB of cache; a token is 2 x 32 layers x
    # 8 KV heads x 128 x 1 byte = 64 KiB.
    # 128/128: 65.27 GiB / (64 KiB x 256) = 4,177 requests -> capped at 4,096 -> rounded
    # to 256: 4,096; tokens 4,096 x (1 + 1) = 8,192 -> rounded to 1,024: 8,192, above
    # isl + batch = 4,224.
    (128, 128, 4096, 8192),
    # 1000/1000: 65.27 / (64 KiB x 2000) = 534.7 -> below 1,024, up to 128: 640; tokens
    # 534.7 x 2 = 1,069 -> below 4,096: max(2,048, 1,280) = 2,048 >= 1000 + 640.
    (1000, 1000, 640, 2048),
    # 20000/2000: 65.27 / (64 KiB x 22000) = 48.6 -> below 256: max(64, 64) = 64; tokens
    # 48.6 x 11 = 534 -> 2,048, then raised to isl + batch = 20,064 (no chunked prefill).
    (20000, 2000, 64, 20064),
])
def test_bench_settings_follow_trtllm_bench_tuning(isl: int, osl: int, max_bs: int,
                                                   max_tokens: int) -> None:
    got = bench_settings(load_system("dgx-h100"), load_model("llama3-8b"), Serving(),
                         Request(isl, osl))
    assert got == (max_bs, max_tokens)


def test_context_iteration_makes_the_first_token_and_overlap_adds_a_step() -> None:
    # 3 requests that fit at once: one context iteration (3 first tokens), osl - 1 = 2
    # generation iterations, and with the overlap scheduler one more that makes nothing.
    req = Request(4, 3)
    with_overlap = schedule_run(req, BenchRun(3), 16, 100, 16)
    assert with_overlap.total_iterations == 4
    assert with_overlap.output_tokens.sum() == 9
    assert list(with_overlap.prefill_requests) == [3, 0]  # the decodes are one row
    assert list(with_overlap.decode_seqs) == [0, 3]
    without = schedule_run(req, BenchRun(3, overlap_extra_step=False), 16, 100, 16)
    assert without.total_iterations == 3
    assert without.output_tokens.sum() == 9


def test_token_budget_limits_prompts_per_iteration() -> None:
    # isl 100, osl 2, 5 requests, 250 tokens per iteration, overlap on. By hand:
    # it 0: 250 // 100 = 2 prompts.                                   tokens 2
    # it 1: 2 decodes; (250 - 2) // 100 = 2 prompts.                  tokens 2 + 2
    # it 2: 4 decodes (the first 2 in their extra step); 1 prompt left. tokens 2 + 1
    # it 3: 3 decodes (2 in their extra step).                         tokens 1
    # it 4: 1 decode in its extra step.                                tokens 0
    s = schedule_run(Request(100, 2), BenchRun(5), 16, 250, 16)
    assert s.total_iterations == 5
    assert list(s.decode_seqs) == [0, 2, 4, 3, 1]
    assert list(s.prefill_requests) == [2, 2, 1, 0, 0]
    assert list(s.output_tokens) == [2, 4, 3, 1, 0]


def test_kv_slots_make_waves() -> None:
    # Room for 2 requests in the KV cache, 4 requests of 1 + 2 tokens, no overlap step:
    # two waves of [context, decode]; the second starts when the first leaves.
    s = schedule_run(Request(1, 2), BenchRun(4, overlap_extra_step=False), 16, 100, 2)
    assert s.total_iterations == 4
    assert list(s.prefill_requests) == [2, 0, 2, 0]
    assert list(s.decode_seqs) == [0, 2, 0, 2]


def test_long_decode_stretches_are_grouped_without_losing_iterations() -> None:
    # One request of 1000 output tokens: 1 context iteration, 999 decodes, 1 extra step;
    # the decode context runs from isl + 1 to isl + 1000, mean isl + 500.5.
    s = schedule_run(Request(10, 1000), BenchRun(1), 16, 100, 16)
    assert s.total_iterations == 1001
    assert s.output_tokens.sum() == 1000
    decode = s.prefill_requests == 0
    mean_ctx = (s.decode_context[decode] * s.iterations[decode]).sum() / 1000
    assert mean_ctx == pytest.approx(10 + 500.5)
    assert len(s.iterations) < 30  # grouped into rows, not one per iteration


def test_cuda_graph_padding() -> None:
    # max_batch_size 896, max_num_tokens 2048: graphs up to 896 (the listed sizes below
    # it and 896 itself, since 1024... were listed); 824 decodes pad to 896, an iteration
    # with a prompt runs unpadded.
    sizes = graph_batch_sizes(BenchRun(1), 896, 2048)
    assert sizes == [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 896]
    got = padded_decode_batch(sizes, np.asarray([824.0, 824.0, 300.0, 0.0]),
                              np.asarray([0.0, 1.0, 0.0, 2.0]))
    assert list(got) == [896, 824, 384, 0]
    assert graph_batch_sizes(BenchRun(1, cuda_graph_batch_sizes=()), 896, 2048) == []


def test_run_counts_every_output_token_and_is_slower_than_its_fastest_iteration() -> None:
    system, model, req = load_system("dgx-h100"), load_model("llama3-8b"), Request(128, 128)
    r = simulate_run(system, model, req, BenchRun(30000))
    assert r.iterations > 30000 * 128 / r.max_batch_size  # waves cannot beat a full batch
    assert 0 < r.peak_batch_requests <= min(r.max_batch_size, r.kv_slots)
    assert r.drain_s > 0 and r.first_full_batch_s > 0
    assert sum(r.time_by_term_s.values()) == pytest.approx(r.duration_s)
    # The steady state is the run without ramp, drain or extra steps at the same host and
    # roofline terms; on this host-bound row the run cannot be faster.
    assert r.output_tokens_per_s < infer(system, model, req).output_tokens_per_s


def test_inputs_that_cannot_run() -> None:
    with pytest.raises(ModelInputError):
        BenchRun(0)
    with pytest.raises(ModelInputError, match="never fits"):
        schedule_run(Request(300, 2), BenchRun(1), 16, 250, 16)
    with pytest.raises(ModelInputError, match="holds none"):
        schedule_run(Request(1, 2), BenchRun(1), 16, 250, 0)
    with pytest.raises(ModelInputError, match="refuse"):
        bench_settings(load_system("dgx-h100"), load_model("llama3-70b"),
                       Serving(weight_dtype="bf16"), Request(128, 128))
