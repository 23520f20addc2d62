"""PNG plots of a sweep: the frontier, and the breakdown of its points as stacked bars
(matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path

from netio.model.sweep import SweepResult

COLOURS = ("#4c72b0", "#8172b2", "#dd8452", "#ccb974", "#64b5cd", "#55a868", "#c44e52",
           "#8c8c8c", "#937860")


def _label(f: dict[str, object]) -> str:
    parts = [f"tp{f['tp']}", f"pp{f['pp']}"]
    for key, short in (("interleave", "v"), ("dp", "dp"), ("ep", "ep"), ("cp", "cp"),
                       ("micro_batch", "mb"), ("zero", "z"), ("concurrency", "c"),
                       ("draft_tokens", "g"), ("replicas", "x")):
        shown_if = (0,) if key == "draft_tokens" else (0, 1)
        if key in f and f[key] not in shown_if:
            val = f[key]
            parts.append(f"{short}{int(val) if isinstance(val, float) else val}")
    if f.get("recompute") not in (None, "none"):
        parts.append(str(f["recompute"])[:3])
    return " ".join(parts)


def plot_sweep(result: SweepResult, prefix: str | Path, max_bars: int = 16) -> list[Path]:
    """Write ``PREFIX-frontier.png`` and ``PREFIX-breakdown.png``; return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    prefix = Path(prefix)
    out_front = prefix.with_name(prefix.name + "-frontier.png")
    out_break = prefix.with_name(prefix.name + "-breakdown.png")
    front = list(result.frontier)
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    cost_key = result.objectives[-1]
    if result.kind == "train":
        xs = [float(f["step_s"]) for f in front]  # type: ignore[arg-type]
        ys = [float(f["memory_per_accelerator_bytes"]) / 2**30 for f in front]  # type: ignore[arg-type]
        ax.set_xlabel("step time [s]")
        ax.set_ylabel("memory per accelerator [GiB]")
    else:
        xs = [float(f["system_tokens_per_s"]) for f in front]  # type: ignore[arg-type]
        ys = [float(f["tokens_per_s_per_user"]) for f in front]  # type: ignore[arg-type]
        ax.set_xlabel("system output tokens/s")
        ax.set_ylabel("output tokens/s per user")
    cs = [float(f[cost_key]) for f in front]  # type: ignore[arg-type]
    sc = ax.scatter(xs, ys, c=cs, cmap="viridis")
    fig.colorbar(sc, ax=ax, label=cost_key.replace("_", " "))
    ax.set_title(f"{result.kind} frontier: {result.model} on {result.system}")
    fig.tight_layout()
    fig.savefig(out_front)
    plt.close(fig)

    shown = front[:max_bars]
    terms: list[str] = []
    for f in shown:
        for k in f["breakdown_s"]:  # type: ignore[attr-defined]
            if k not in terms:
                terms.append(k)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.6 * len(shown) + 3.5), 4.8))
    names = [_label(f) for f in shown]
    bottoms = [0.0] * len(shown)
    scale = 1.0 if result.kind == "train" else 1e3
    for term, colour in zip(terms, COLOURS * 2, strict=False):
        heights = [float(f["breakdown_s"].get(term, 0.0)) * scale  # type: ignore[attr-defined]
                   for f in shown]
        if not any(heights):
            continue
        ax.bar(range(len(shown)), heights, bottom=bottoms, color=colour,
               label=term.removesuffix("_s").replace("_", " "))
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    ax.set_xticks(range(len(shown)), names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("time per step [s]" if result.kind == "train"
                  else "time per iteration of one stage [ms]")
    ax.set_title("breakdown of the frontier layouts")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(out_break)
    plt.close(fig)
    return [out_front, out_break]
