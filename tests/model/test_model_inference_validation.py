"""The inference model against TensorRT-LLM's published max-throughput runs.

Source: NVIDIA TensorRT-LLM, docs/source/performance/perf-overview.md (PyTorch backend,
``trtllm-bench throughput``, ModelOpt FP8 checkpoints nvidia/Llama-3.1-8B-Instruct-FP8 and
nvidia/Llama-3.3-70B-Instruct-FP8, "Total Output Throughput (tokens/sec)"). The systems
are the ``dgx-h100`` preset (datasheets and microbenchmarks, see its sources) and the
serving defaults of :class:`netio.model.inference.Serving` (each sourced there); nothing
is fitted to these rows. Llama 3.1 and 3.3 share the Llama 3 shapes of the presets.

Since issue 11 the serving defaults carry no value chosen with these rows in view: FP8
GEMMs run at 0.875 of the bf16 curve (NVIDIA's cuBLAS 12.9 post: FP8 1.75x BF16 on
Hopper for large matmuls), GEMM rows pad to Hopper's 64-row warpgroup tile (PTX ISA), and
the host walks every request once per iteration (29.4 us each, 580 us always exposed:
TensorRT-LLM pull request 10273 and issue 13957). With them the four rows come out +19.3,
+5.3, +5.8 and +14.7 % (median 10.3 %, max 19.3 %): the median misses the issue's 10 %
target by 0.3 points. The earlier 0.82 knob (chosen with the rows in view) met it; it is
gone, and the miss is recorded here rather than tuned away.

Since issue 11 (benchmark run) the rows are compared with the benchmark as it is run, not
with a steady state: :mod:`netio.model.serving_run` simulates ``trtllm-bench throughput``
iteration by iteration with the doc's request count per row (its "Preparing a Dataset"
table), all requests waiting at t = 0, trtllm-bench's derived ``max_batch_size`` and
``max_num_tokens`` (tuning.py; chunked prefill off), the GUARANTEED_NO_EVICT capacity
scheduler, the overlap scheduler's extra decoding step and the doc's CUDA-graph padding
(its ``llm_options.yml``). Every iteration is timed by the same roofline. Nothing was
fitted: the settings are read from the sources, and the four rows come out +9.9, -1.9,
+4.3 and +13.6 % (median 7.1 %, max 13.6 %; the steady state gave +19.3, +5.3, +5.8 and
+14.7 %). The steady state keeps its own regression guard below.

After the two changes of issue 11 (further; the notes below): +9.4, -1.9, +6.7 and +14.7 %
(median 8.1 %, max 14.7 %): the NVML memory total gives 8B 1000/1000 and 70B 128/128 a
larger batch (trtllm-bench derives its max_batch_size from the same total), which the
published rows do not reward.

Issue 11 (further published measurements): the figures below were written down, with their
sources, before the model was changed; each mechanism is applied whatever it does to the rows.

* H200 rows' own settings (perf-overview.md): "H200 SXM 141GB (DGX H200)"; the same dataset
  and ``llm_options.yml`` as the H100 rows; "In many cases, we also use a higher KV cache
  percentage by setting --kv_cache_free_gpu_mem_fraction 0.95 ... We fall back to 0.90 or
  lower if out-of-memory errors are encountered": which rows used 0.95 is not published, so
  the default 0.90 stays (0.95 would only make the model more optimistic).
* Memory the runtime sees: ``nvidia-smi`` reports 143771 MiB on an H200 SXM (public
  nvidia-smi outputs, e.g. GPU Operator and TensorRT-LLM/vLLM issue logs) and 81559 MiB on an
  H100 SXM 80GB; the presets held 141e9 B (the datasheet's "141 GB" read as decimal, 6.5 %
  low) and 80 GiB (0.4 % high).
* Achieved HBM bandwidth: the presets' plateau is 0.90 of peak (H200: 4.32 of 4.8 TB/s), in the
  4.0-4.3 TB/s range of public copy measurements on H200; unchanged.
* Fused prefill attention (FlashAttention-3, Shah et al. 2024, arXiv 2407.08608, Figure 5c:
  forward, BF16, head dim 128, H100 SXM5, no causal mask): 467, 565, 625, 638, 646, 648
  TFLOPS at 512, 1k, 2k, 4k, 8k, 16k tokens (0.47 to 0.65 of the 989.4 TFLOPS peak). The
  model ran prefill attention on the GEMM curve (up to 0.80 of peak) instead.
* FP8 GEMMs on Hopper (DeepGEMM README, H800 SXM: the H100's SMs and 3.35 TB/s HBM3, FP8
  with 1x128/128x128 block scaling, NVCC 12.8): 18 dense shapes, M = 64, 128, 4096, e.g.
  128 x 7168 x 16384 at 645 TFLOPS / 2604 GB/s, 4096 x 7168 x 16384 at 1358 TFLOPS. The
  model's GEMM roofline is faster than every one of them but one (median 14 %): recorded as a
  guard below, not applied (block scaling costs the CUDA cores work that TensorRT-LLM's
  per-tensor FP8 Llama GEMMs do not do, so the figures are a lower bound for those).
* Decode attention (paged KV): one public FlashAttention-3 paged-decode run on H100 (MHA,
  batch 16, page size 8; Dao-AILab/flash-attention issue 1572) reached 1.80-1.85 TB/s (0.55
  of peak) while the same issue reports runs close to the ideal time on other H100s:
  contradictory, not applied.
* Llama 3.1 405B (Meta, "The Llama 3 Herd of Models", arXiv 2407.21783, Table 3: 126 layers,
  model dimension 16,384, FFN 53,248, 128 heads, 8 KV heads, vocabulary 128,256), TP8 FP8,
  same tables: H200 3814, 5348, 4741, 4724, 3330, 3722, 456, 2948, 650, 505 and H100 3627,
  4340, 3116, 3994, 2919, 2895, 453, 2296, 610, 345 tokens/s for 128/128, 128/2048, 128/4096,
  500/2000, 1000/1000, 1000/2000, 2048/128, 2048/2048, 5000/500, 20000/2000. Before any
  change the run came out H200 median 5.9 %, max 10.5 %; H100 median 7.1 %, max 28.9 %
  (128/4096), all but one optimistic.
"""

from __future__ import annotations

import statistics

import numpy as np

from netio.model import load_model, load_system
from netio.model.inference import Request, Serving, infer, padded_rows, roofline_s
from netio.model.schema import Model
from netio.model.serving_run import BenchRun, simulate_run

# (model preset, tensor parallel, input tokens, output tokens, output tokens/s on H100)
ROWS = [
    ("llama3-8b", 1, 128, 128, 28312),
    ("llama3-8b", 1, 128, 2048, 22714),
    ("llama3-8b", 1, 1000, 1000, 15220),
    ("llama3-70b", 2, 128, 128, 6378),
]

# perf-overview.md, "Preparing a Dataset": $num_requests per ISL/OSL.
NUM_REQUESTS = {
    (128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (1000, 2000): 1500,
    (2048, 128): 3000, (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000,
    (500, 2000): 3000, (20000, 2000): 1000,
}


def run_errors(system_name: str,
               rows: list[tuple[str, int, int, int, int]]) -> list[float]:
    """Signed relative error of the simulated benchmark run on each row."""
    system = load_system(system_name)
    out = []
    for name, tp, isl, osl, published in rows:
        r = simulate_run(system, load_model(name), Request(isl, osl),
                         BenchRun(NUM_REQUESTS[(isl, osl)]), tp=tp)
        out.append(r.output_tokens_per_s / published - 1.0)
    return out


def steady_errors() -> list[float]:
    system = load_system("dgx-h100")
    out = []
    for name, tp, isl, osl, published in ROWS:
        r = infer(system, load_model(name), Request(isl, osl), tp=tp)
        assert r.feasible, r.infeasible_reason
        out.append(r.output_tokens_per_s / published - 1.0)
    return out


def test_trtllm_perf_overview_rows_within_bounds() -> None:
    # The issue's bounds, on the benchmark as run (module doc).
    errs = [abs(e) for e in run_errors("dgx-h100", ROWS)]
    assert statistics.median(errs) <= 0.10, errs
    assert max(errs) <= 0.20, errs


def test_trtllm_perf_overview_rows_steady_state_regression_guard() -> None:
    # The steady state on the same rows (median 10.3 %, max 19.3 %, all optimistic; 10.5 %
    # and 19.3 % since issue 11, further): bounds set after seeing them, a guard against
    # drifting further, not a validation.
    errs = steady_errors()
    assert statistics.median(abs(e) for e in errs) <= 0.12, errs
    assert max(abs(e) for e in errs) <= 0.22, errs


# The other H100 rows of the same tables (Llama 3.1 8B TP1, Llama 3.3 70B TP2). These are
# not the issue's validation rows; the bounds below were set after seeing the model's
# errors on them, so this is a regression guard that keeps later changes from drifting
# away from published figures, not a validation. Steady state on the first 13 (before the
# benchmark run): median 10.9 %, max 19.0 %. The last three 70B rows were added with the
# run (steady state +20.8, +26.1, +30.9 %). The run on all 16: median 10.2 %, max 19.0 %
# (70B 1000/2000), all optimistic (+1.3 % to +19.0 %). Since issue 11 (further): median
# 9.7 %, max 19.0 %, all optimistic (+0.7 % to +19.0 %).
OTHER_ROWS = [
    ("llama3-8b", 1, 128, 4096, 14325),
    ("llama3-8b", 1, 500, 2000, 17660),
    ("llama3-8b", 1, 1000, 2000, 13899),
    ("llama3-8b", 1, 2048, 128, 3450),
    ("llama3-8b", 1, 2048, 2048, 9305),
    ("llama3-8b", 1, 5000, 500, 3459),
    ("llama3-8b", 1, 20000, 2000, 1351),
    ("llama3-70b", 2, 128, 2048, 6651),
    ("llama3-70b", 2, 128, 4096, 4199),
    ("llama3-70b", 2, 500, 2000, 5222),
    ("llama3-70b", 2, 1000, 1000, 4205),
    ("llama3-70b", 2, 2048, 128, 762),
    ("llama3-70b", 2, 5000, 500, 898),
    ("llama3-70b", 2, 1000, 2000, 4146),
    ("llama3-70b", 2, 2048, 2048, 3082),
    ("llama3-70b", 2, 20000, 2000, 437),
]


def test_other_h100_rows_regression_guard() -> None:
    errs = [abs(e) for e in run_errors("dgx-h100", OTHER_ROWS)]
    assert statistics.median(errs) <= 0.12, errs
    assert max(errs) <= 0.22, errs


# Published rows not used before issue 11: the H200 columns of the same tables (HGX H200,
# Llama 3.1 8B TP1 and Llama 3.3 70B TP1, FP8). The steady state was optimistic on all 20
# (median 16.5 %, max 30.5 %). The benchmark run: median 12.5 %, max 22.7 % (70B
# 128/2048), one row pessimistic (8B 128/2048, -2.6 %): still outside the issue's bounds,
# so this is recorded, not claimed. The bounds below were set after seeing those errors:
# a regression guard only. Since issue 11 (further): median 11.9 %, max 21.3 % (70B
# 128/4096), all optimistic (+0.2 % to +21.3 %): the 6.5 % more memory the runtime sees
# moves the 70B TP1 rows' batch sizes both ways (128/2048 +22.7 -> +11.6 %, 128/4096
# +12.7 -> +21.3 %).
H200_ROWS = [
    ("llama3-8b", 1, 128, 128, 27911),
    ("llama3-8b", 1, 128, 2048, 26221),
    ("llama3-8b", 1, 128, 4096, 18027),
    ("llama3-8b", 1, 500, 2000, 20770),
    ("llama3-8b", 1, 1000, 1000, 17744),
    ("llama3-8b", 1, 1000, 2000, 16828),
    ("llama3-8b", 1, 2048, 128, 3538),
    ("llama3-8b", 1, 2048, 2048, 12194),
    ("llama3-8b", 1, 5000, 500, 3902),
    ("llama3-8b", 1, 20000, 2000, 1804),
    ("llama3-70b", 1, 128, 128, 3803),
    ("llama3-70b", 1, 128, 2048, 4336),
    ("llama3-70b", 1, 128, 4096, 2872),
    ("llama3-70b", 1, 500, 2000, 3666),
    ("llama3-70b", 1, 1000, 1000, 2909),
    ("llama3-70b", 1, 1000, 2000, 2994),
    ("llama3-70b", 1, 2048, 128, 442),
    ("llama3-70b", 1, 2048, 2048, 2003),
    ("llama3-70b", 1, 5000, 500, 566),
    ("llama3-70b", 1, 20000, 2000, 283),
]


def test_h200_rows_regression_guard() -> None:
    errs = run_errors("hgx-h200", H200_ROWS)
    assert min(errs) > -0.05, errs
    assert statistics.median(abs(e) for e in errs) <= 0.15, errs
    assert max(abs(e) for e in errs) <= 0.26, errs


# Issue 11 (further published measurements): Llama 3.1 405B, TP8, FP8, on the H200 and H100
# columns of the same perf-overview.md table; the model built from Meta's Table 3 (arXiv
# 2407.21783), no preset needed. The figures were written down (module doc) and the run was
# timed on them before the two changes of this issue (NVML memory totals, FlashAttention-3
# prefill rate), neither of which was chosen with them in view. H200: median 4.3 %, max
# 10.5 % (20000/2000), within the issue's 10 % / 20 %. H100: median 6.2 %, max 28.9 %
# (128/4096; 20000/2000 +18.1 %, 1000/2000 +14.8 %), outside the 20 % bound on that row;
# its max bound below was set after seeing it: a guard, not a claim.
LLAMA_405B = Model(name="llama3.1-405b", layers=126, hidden_size=16384, attention_heads=128,
                   kv_heads=8, ffn_hidden_size=53248, ffn_gated=True, vocab_size=128256,
                   sequence_length=8192, dropout=False, tied_embeddings=False)

# (ISL, OSL, H200 TP8 tok/s, H100 TP8 tok/s)
ROWS_405B = [
    (128, 128, 3814, 3627), (128, 2048, 5348, 4340), (128, 4096, 4741, 3116),
    (500, 2000, 4724, 3994), (1000, 1000, 3330, 2919), (1000, 2000, 3722, 2895),
    (2048, 128, 456, 453), (2048, 2048, 2948, 2296), (5000, 500, 650, 610),
    (20000, 2000, 505, 345),
]


def errors_405b(system_name: str, column: int) -> list[float]:
    system = load_system(system_name)
    out = []
    for row in ROWS_405B:
        isl, osl, published = row[0], row[1], row[column]
        r = simulate_run(system, LLAMA_405B, Request(isl, osl),
                         BenchRun(NUM_REQUESTS[(isl, osl)]), tp=8)
        out.append(r.output_tokens_per_s / published - 1.0)
    return out


def test_llama_405b_tp8_h200_rows_within_the_issue_bounds() -> None:
    errs = [abs(e) for e in errors_405b("hgx-h200", 2)]
    assert statistics.median(errs) <= 0.10, errs
    assert max(errs) <= 0.20, errs


def test_llama_405b_tp8_h100_rows() -> None:
    errs = errors_405b("dgx-h100", 3)
    assert statistics.median(abs(e) for e in errs) <= 0.10, errs
    assert max(abs(e) for e in errs) <= 0.30, errs  # guard (128/4096 is +28.9 %)


# The GEMM roofline against published Hopper FP8 GEMM kernels: DeepGEMM's README table
# (deepseek-ai/DeepGEMM, "Normal GEMMs for dense models", H800 SXM: the H100's SMs and
# 3.35 TB/s HBM3; FP8 E4M3 with 1x128 / 128x128 block scaling, bf16 output, NVCC 12.8).
# Spec of one GEMM, written out: D[m, n] = A[m, k] B[n, k]^T does 2 m k n FLOPs (on whole
# 64-row tiles) and moves k n + m k bytes in and 2 m n out. The model is faster than 17 of
# the 18 (median 14 %; +120 % at k = 512, where a tile's fixed work is not amortised, a
# cost the FLOP-indexed curve does not see; +2 % and +1 % on the two large square-ish
# shapes). Recorded, not applied: block scaling costs CUDA-core work that TensorRT-LLM's
# per-tensor FP8 Llama GEMMs do not do. Bounds set after seeing the errors: a guard.
DEEPGEMM_H800 = [  # (m, n, k, TFLOPS)
    (64, 2112, 7168, 206), (64, 24576, 1536, 289), (64, 32768, 512, 219),
    (64, 7168, 16384, 336), (64, 4096, 7168, 287), (64, 7168, 2048, 295),
    (128, 2112, 7168, 352), (128, 24576, 1536, 535), (128, 32768, 512, 358),
    (128, 7168, 16384, 645), (128, 4096, 7168, 533), (128, 7168, 2048, 510),
    (4096, 2112, 7168, 1058), (4096, 24576, 1536, 990), (4096, 32768, 512, 590),
    (4096, 7168, 16384, 1358), (4096, 4096, 7168, 1304), (4096, 7168, 2048, 1025),
]


def test_gemm_roofline_against_deepgemm_h800_guard() -> None:
    system, serving = load_system("dgx-h100"), Serving()
    ratio = serving.matmul_efficiency_ratio_by_dtype["fp8"]
    optimism = []
    for m, n, k, tflops in DEEPGEMM_H800:
        rows = np.asarray([float(m)])
        flops = 2.0 * padded_rows(serving, rows) * k * n
        bytes_ = np.asarray([float(k * n + m * k + 2 * m * n)])
        model_s = float(roofline_s(system, "fp8", ratio, flops, bytes_)[0])
        published_s = 2.0 * m * n * k / (tflops * 1e12)
        optimism.append(published_s / model_s - 1.0)
    assert min(optimism) > -0.05, optimism
    assert statistics.median(optimism) <= 0.20, optimism
    assert max(optimism) <= 1.30, optimism
