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
"""

from __future__ import annotations

import statistics

import pytest

from netio.model import load_model, load_system
from netio.model.inference import Request, infer

# (model preset, tensor parallel, input tokens, output tokens, output tokens/s on H100)
ROWS = [
    ("llama3-8b", 1, 128, 128, 28312),
    ("llama3-8b", 1, 128, 2048, 22714),
    ("llama3-8b", 1, 1000, 1000, 15220),
    ("llama3-70b", 2, 128, 128, 6378),
]


def errors() -> list[float]:
    system = load_system("dgx-h100")
    out = []
    for name, tp, isl, osl, published in ROWS:
        r = infer(system, load_model(name), Request(isl, osl), tp=tp)
        assert r.feasible, r.infeasible_reason
        out.append(r.output_tokens_per_s / published - 1.0)
    return out


@pytest.mark.xfail(strict=True, reason="median 10.3 % against the issue's 10 % target "
                   "since the fitted FP8 knob was replaced by sourced terms (module doc)")
def test_trtllm_perf_overview_rows_within_bounds() -> None:
    errs = [abs(e) for e in errors()]
    assert statistics.median(errs) <= 0.10, errs
    assert max(errs) <= 0.20, errs


def test_trtllm_perf_overview_rows_regression_guard() -> None:
    # Bounds set after seeing the errors above (median 10.3 %, max 19.3 %, all
    # optimistic): a guard against drifting further from the published figures, not a
    # validation.
    errs = errors()
    assert statistics.median(abs(e) for e in errs) <= 0.12, errs
    assert max(abs(e) for e in errs) <= 0.22, errs


# The other H100 rows of the same tables (Llama 3.1 8B TP1, Llama 3.3 70B TP2). These are
# not the validation rows; the bounds below were set after seeing the model's
# errors on them (median 10 %, max 29 %, all optimistic; since issue 11: median 10.9 %, max
# 19.0 %), so this is a regression guard that
# keeps later changes from drifting away from published figures, not a validation.
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
]


def test_other_h100_rows_regression_guard() -> None:
    system = load_system("dgx-h100")
    errs = []
    for name, tp, isl, osl, published in OTHER_ROWS:
        r = infer(system, load_model(name), Request(isl, osl), tp=tp)
        assert r.feasible, (name, isl, osl, r.infeasible_reason)
        errs.append(abs(r.output_tokens_per_s / published - 1.0))
    assert statistics.median(errs) <= 0.15, errs
    assert max(errs) <= 0.30, errs


# Published rows not used before issue 11: the H200 columns of the same tables (HGX H200,
# Llama 3.1 8B TP1 and Llama 3.3 70B TP1, FP8). The model is optimistic on all 20 (median
# 16.5 %, max 30.5 %; the 70B rows, GEMM-bound at 60-170 requests, are the worst): outside
# the bounds, so this is recorded, not claimed. The bounds below were set after
# seeing those errors: a regression guard only. The 128/128 rows of H100 and H200 agree
# (28,312 and 27,911 published) as the model's host-bound prediction says they should
# (same CPU walk of ~4,100 requests per iteration on both); the level is 20 % high.
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
    system = load_system("hgx-h200")
    errs = []
    for name, tp, isl, osl, published in H200_ROWS:
        r = infer(system, load_model(name), Request(isl, osl), tp=tp)
        assert r.feasible, (name, isl, osl, r.infeasible_reason)
        errs.append(r.output_tokens_per_s / published - 1.0)
    assert min(errs) > 0.0, errs  # optimistic everywhere: the model omits costs, adds none
    assert statistics.median(errs) <= 0.20, errs
    assert max(errs) <= 0.35, errs
