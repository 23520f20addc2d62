"""netio-model sweep speed: configurations per second on one core.

Run: ``python bench/bench_sweep.py [--quick]``. Times the whole training sweep of Llama 3
70B on 1,024 H100s (enumerating every layout, evaluating them in one numpy pass, counting
the infeasible ones by reason and finding the Pareto frontier) and the inference sweep
of Llama 3 70B on 64 H100s with speculative draft lengths, best of 3 runs each, with
numpy's threads pinned to one (the evaluation is element-wise numpy, single-threaded
anyway). The issue asks for at least 100,000 configurations per second.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

from netio.model import load_model, load_system  # noqa: E402
from netio.model.inference import Request, Serving, Speculation  # noqa: E402
from netio.model.schema import execution_from_dict  # noqa: E402
from netio.model.sweep import sweep_infer_arrays, sweep_train_arrays  # noqa: E402

BASE = {
    "tensor_parallel": 1, "pipeline_parallel": 1, "interleave": 1, "data_parallel": 1,
    "expert_parallel": 1, "context_parallel": 1, "sequence_parallel": False, "zero_stage": 1,
    "micro_batch_size": 1, "global_batch_size": 1024, "recompute": "selective",
    "attention": "flash", "compute_dtype": "bf16", "grad_reduce_dtype": "fp32",
    "overlap_grad_reduce": True, "overlap_tp_comm": False}


def _best(fn: object, runs: int) -> tuple[float, int, int]:
    best, n, front = float("inf"), 0, 0
    for _ in range(runs):
        start = time.perf_counter()
        out = fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
        n, front = len(out.layouts), len(out.frontier)
    return best, n, front


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sweeps (CI smoke)")
    args = parser.parse_args()
    system, model = load_system("dgx-h100"), load_model("llama3-70b")
    base = execution_from_dict(BASE)
    counts = [256] if args.quick else [1024]
    runs = 1 if args.quick else 3
    t, n, f = _best(lambda: sweep_train_arrays(system, model, counts, base, 2.0), runs)
    print(f"{'sweep':<58}{'configs':>10}{'time[s]':>9}{'configs/s':>12}{'frontier':>9}")
    print(f"{f'train, llama3-70b on {counts[0]} x dgx-h100':<58}{n:>10,}{t:>9.3f}"
          f"{n / t:>12,.0f}{f:>9}")
    spec = Speculation(acceptance_rate=0.7, cost_ratio=0.05)
    icounts = [16] if args.quick else [64]
    t, n, f = _best(lambda: sweep_infer_arrays(system, model, icounts, Request(1000, 1000),
                                               Serving(), spec, 2.0), runs)
    print(f"{f'infer, llama3-70b on {icounts[0]} x dgx-h100, drafts 0..8':<58}{n:>10,}"
          f"{t:>9.3f}{n / t:>12,.0f}{f:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
