"""The step breakdown as a stacked-bar PNG (one bar per result; matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from netio.model.training import BREAKDOWN_TERMS, TrainResult

#: One colour per breakdown term, in BREAKDOWN_TERMS order.
COLOURS = ("#4c72b0", "#8172b2", "#dd8452", "#ccb974", "#64b5cd", "#55a868", "#c44e52",
           "#8c8c8c")


def plot_breakdown(results: Sequence[TrainResult], path: str | Path,
                   labels: Sequence[str] | None = None) -> Path:
    """Write the breakdown of each result as one stacked bar (seconds) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(labels) if labels is not None else [
        f"{r.model}\n{r.accelerators} x {r.system}" for r in results]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(results) + 3.0), 4.5))
    bottoms = [0.0] * len(results)
    for term, colour in zip(BREAKDOWN_TERMS, COLOURS, strict=True):
        heights = [r.breakdown_s[term] for r in results]
        if not any(heights):
            continue
        ax.bar(names, heights, bottom=bottoms, color=colour, label=term.replace("_", " "))
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    for i, r in enumerate(results):
        note = f"MFU {r.mfu:.0%}" + ("" if r.feasible else "\ninfeasible")
        ax.annotate(note, (i, bottoms[i]), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("time per step [s]")
    ax.set_title("training step breakdown")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out
