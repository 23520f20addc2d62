"""netio-model evaluation speed.

Run: ``python bench/bench_model.py [--quick]``. Times one ``train`` evaluation (the
typed, explained result of one execution) on Korthikanti et al. 2022 Table 5's 175B row
(the row Calculon's ~0.5 s per evaluation is quoted for), with the inputs already loaded
and with loading them from the presets, and the vectorised ``evaluate`` over many
layouts in one numpy pass (layouts per second). Calculon itself is not on PyPI (the
``calculon`` there is an unrelated package), so it is not run here: the figures are
absolute, best of 5 batches.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable

import numpy as np

from netio.model import Layouts, evaluate, load_execution, load_model, load_system, train


def _best_s(fn: Callable[[], object], budget_s: float) -> float:
    """Seconds per call of ``fn``: best of 5 batches sized to the budget."""
    fn()
    start = time.perf_counter()
    fn()
    one = max(time.perf_counter() - start, 1e-9)
    calls = max(1, int(budget_s / 5 / one))
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def _layouts(n: int, base: Layouts) -> Layouts:
    rng = np.random.default_rng(1)
    tp = rng.choice([1, 2, 4, 8], n)
    pp = rng.choice([1, 2, 4, 8, 16], n)
    dp = rng.choice([1, 2, 4, 8], n)
    mb = rng.choice([1, 2, 4], n)
    fields = {
        "tensor_parallel": tp, "pipeline_parallel": pp,
        "interleave": np.where(pp > 1, rng.choice([1, 2, 3], n), 1),
        "data_parallel": dp, "expert_parallel": np.ones(n, np.int64),
        "context_parallel": np.ones(n, np.int64),
        "sequence_parallel": rng.integers(0, 2, n).astype(bool),
        "zero_stage": rng.integers(0, 4, n), "micro_batch_size": mb,
        "global_batch_size": dp * mb * rng.choice([8, 16, 32], n),
        "recompute": rng.integers(0, 3, n), "attention": rng.integers(0, 2, n),
        "overlap_grad_reduce": rng.integers(0, 2, n).astype(bool),
        "overlap_tp_comm": rng.integers(0, 2, n).astype(bool),
    }
    return dataclasses.replace(base, **{k: np.asarray(v) for k, v in fields.items()})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (CI smoke)")
    args = parser.parse_args()
    budget = 0.5 if args.quick else 3.0
    system, model = load_system("dgx-a100-80gb"), load_model("gpt3-175b")
    execution = load_execution("korthikanti-175b-seqsel")
    t_train = _best_s(lambda: train(system, model, execution), budget)
    t_loaded = _best_s(lambda: train(load_system("dgx-a100-80gb"), load_model("gpt3-175b"),
                                     load_execution("korthikanti-175b-seqsel")), budget)
    n = 10_000 if args.quick else 100_000
    lay = _layouts(n, Layouts.from_execution(execution))
    t_many = _best_s(lambda: evaluate(system, model, lay), budget * 2)
    print("netio-model, Korthikanti Table 5 175B row (TP 8, PP 8 x 3, SP + selective)")
    print(f"{'what':<46}{'time':>14}")
    print(f"{'train() one execution, inputs loaded':<46}{t_train * 1e3:>11.3f} ms")
    print(f"{'train() including loading the three presets':<46}{t_loaded * 1e3:>11.3f} ms")
    print(f"{f'evaluate() {n:,} layouts, one numpy pass':<46}{t_many * 1e3:>11.1f} ms"
          f"  ({n / t_many:,.0f} layouts/s)")
    print("Calculon (~0.5 s per evaluation, per the issue) is not on PyPI; not run.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
