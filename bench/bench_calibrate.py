"""Close the loop on this machine: calibrate compute from micro-benchmarks, predict real
workloads with netio-model, measure them, report the prediction error.

Run: ``python bench/bench_calibrate.py [--quick] [--threads N] [--json OUT.json]``.

1. GEMM FLOP/s against size (numpy float32 square matmuls) and memory bandwidth against
   size (``np.copyto``, bytes read + written), best of several runs each.
2. :func:`netio.model.calibrate.compute_system` turns them into a one-accelerator system.
3. Predict, then measure, two workloads whose shapes were not in the calibration:
   a matmul chain (rectangular GEMMs, predicted by the roofline of each GEMM with the
   calibrated curves) and a transformer block forward over a prompt (one layer of a
   small Llama-style model in numpy float32: RMSNorm, QKV, full softmax attention, output
   projection, SwiGLU MLP, residuals; predicted by netio-model's inference iteration,
   :func:`netio.model.inference.iteration`, with fp32 weights and activations).
4. Print predicted, measured and the error for each.

Timing depends on the machine and its load (other processes share its cores); numbers
are best-of-N. Not a test: CI never depends on it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable


def _threads(argv: list[str]) -> str:
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return "1"


_T = _threads(sys.argv)
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = _T

import numpy as np  # noqa: E402

from netio.model.calibrate import compute_system  # noqa: E402
from netio.model.inference import Serving, iteration, roofline_s  # noqa: E402
from netio.model.schema import Model, System  # noqa: E402


def best_s(fn: Callable[[], object], runs: int) -> float:
    fn()
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_gemm(sizes: list[int], runs: int) -> list[tuple[float, float]]:
    out = []
    for n in sizes:
        a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
        b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
        c = np.empty((n, n), dtype=np.float32)
        t = best_s(lambda a=a, b=b, c=c: np.matmul(a, b, out=c), runs)
        out.append((2.0 * n ** 3, 2.0 * n ** 3 / t))
    return out


def measure_copy(sizes: list[int], runs: int) -> list[tuple[float, float]]:
    out = []
    for nbytes in sizes:
        src = np.ones(nbytes // 4, dtype=np.float32)
        dst = np.empty_like(src)
        t = best_s(lambda s=src, d=dst: np.copyto(d, s), runs)
        out.append((2.0 * nbytes, 2.0 * nbytes / t))
    return out


def matmul_chain(system: System, runs: int) -> tuple[float, float]:
    shapes = [(384, 768, 1536), (384, 1536, 768), (96, 3072, 3072), (1200, 200, 900),
              (64, 4096, 256)]
    rng = np.random.default_rng(2)
    mats = [(rng.standard_normal((m, k), dtype=np.float32),
             rng.standard_normal((k, n), dtype=np.float32)) for m, k, n in shapes]

    def run() -> None:
        for a, b in mats:
            np.matmul(a, b)

    measured = best_s(run, runs)
    predicted = 0.0
    for m, k, n in shapes:
        flops = np.asarray([2.0 * m * k * n])
        bytes_ = np.asarray([4.0 * (m * k + k * n + m * n)])
        predicted += float(roofline_s(system, "fp32", 1.0, flops, bytes_)[0])
    return predicted, measured


def transformer_block(system: System, runs: int, tokens: int) -> tuple[float, float]:
    h, heads, f = 1024, 16, 2816
    d = h // heads
    model = Model("numpy-block", 1, h, heads, heads, f, True, 1, tokens, False, True)
    rng = np.random.default_rng(3)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[0])).astype(
            np.float32)

    wqkv, wo, w13, w2 = w(h, 3 * h), w(h, h), w(h, 2 * f), w(f, h)
    g1 = np.ones(h, dtype=np.float32)
    g2 = np.ones(h, dtype=np.float32)
    x0 = rng.standard_normal((tokens, h), dtype=np.float32)

    def rms(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g

    def run() -> np.ndarray:
        x = x0
        qkv = rms(x, g1) @ wqkv
        q = qkv[:, :h].reshape(tokens, heads, d).transpose(1, 0, 2)
        k = qkv[:, h:2 * h].reshape(tokens, heads, d).transpose(1, 2, 0)
        v = qkv[:, 2 * h:].reshape(tokens, heads, d).transpose(1, 0, 2)
        s = (q @ k) * np.float32(1.0 / np.sqrt(d))
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = (s @ v).transpose(1, 0, 2).reshape(tokens, h)
        x = x + o @ wo
        u = rms(x, g2) @ w13
        a = u[:, :f]
        a = a / (1.0 + np.exp(-a)) * u[:, f:]
        return x + a @ w2

    measured = best_s(run, runs)
    sv = Serving(weight_dtype="fp32", kv_dtype="fp32", activation_dtype="fp32",
                 matmul_efficiency_ratio_by_dtype={}, causal_fraction=1.0,
                 iteration_overhead_s=0.0, host_per_request_s=0.0, gemm_row_tile=1,
                 gemm_swap_tile_rows=1,  # numpy: no serving host, no tensor-core tiles
                 attention_fused=False)  # numpy materialises the scores
    one = np.asarray([1.0])
    it = iteration(system, model, sv, one, one, one, np.asarray([0.0]), one,
                   np.asarray([float(tokens)]), np.asarray([0.0]),
                   np.asarray([float(tokens)]), np.asarray([0.0]))
    predicted = float((it.total_s - it.lm_head_s)[0])
    return predicted, measured


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer runs and sizes")
    p.add_argument("--threads", default="1", help="BLAS threads (default 1: one core)")
    p.add_argument("--json", default=None, help="also write the results as JSON here")
    p.add_argument("--repeat", type=int, default=1,
                   help="calibrate, predict and measure this many times; report the median "
                   "error (a shared machine's load changes between runs)")
    args = p.parse_args()
    runs = 3 if args.quick else 7
    results = [_once(args, runs) for _ in range(max(args.repeat, 1))]
    if len(results) > 1:
        print("\nmedian error over the repeats:")
        for i, row in enumerate(results[0]):
            errs = sorted(r[i]["error_ratio"] for r in results)
            print(f"  {row['workload']:<42}{errs[len(errs) // 2]:>+9.1%}   (all: "
                  + ", ".join(f"{e:+.0%}" for e in errs) + ")")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"threads": args.threads, "repeats": results}, fh, indent=1)
    return 0


def _once(args: argparse.Namespace, runs: int) -> list[dict[str, object]]:
    gemm = measure_gemm([32, 64, 128, 256, 512, 1024] + ([] if args.quick else [1536, 2048]),
                        runs)
    copy = measure_copy([1 << k for k in range(14, 27 if args.quick else 29, 2)], runs)
    try:
        memory = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        memory = 8e9
    system = compute_system("this-cpu", gemm, copy, memory)
    print(f"calibrated on this machine, {args.threads} BLAS thread(s)")
    print(f"{'GEMM FLOPs':>14}{'GFLOP/s':>10}   {'copy bytes':>12}{'GB/s':>8}")
    for i in range(max(len(gemm), len(copy))):
        left = f"{gemm[i][0]:>14.3g}{gemm[i][1] / 1e9:>10.2f}" if i < len(gemm) else " " * 24
        right = f"{copy[i][0]:>12.3g}{copy[i][1] / 1e9:>8.2f}" if i < len(copy) else ""
        print(f"{left}   {right}")
    rows = [("matmul chain (5 rectangular GEMMs)", *matmul_chain(system, runs)),
            ("transformer block forward, 512 tokens", *transformer_block(system, runs, 512)),
            ("transformer block forward, 128 tokens", *transformer_block(system, runs, 128))]
    print(f"\n{'workload':<42}{'predicted[ms]':>14}{'measured[ms]':>14}{'error':>9}")
    out: list[dict[str, object]] = []
    for name, pred, meas in rows:
        print(f"{name:<42}{pred * 1e3:>14.3f}{meas * 1e3:>14.3f}{pred / meas - 1:>+9.1%}")
        out.append({"workload": name, "predicted_s": pred, "measured_s": meas,
                    "error_ratio": pred / meas - 1})
    return out


if __name__ == "__main__":
    sys.exit(main())
