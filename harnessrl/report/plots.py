"""The report's PNGs: success by stage (with 95% intervals), RL reward and malformed rate over steps,
how many turns episodes took, and the tool strategy over RL steps. Agg backend: no display needed,
same pixels every time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

STAGE_COLORS = {"base": "#9e9e9e", "cpt": "#7986cb", "sft": "#4db6ac", "rl": "#ef6c00", "long_horizon": "#c62828"}
PLOTS = {
    "success": "success_by_stage.png",
    "training": "rl_training.png",
    "turns": "turns_distribution.png",
    "strategy": "rl_strategy.png",
}


def _label(r: dict[str, Any]) -> str:
    return f"{r['stage']}\n{r['checkpoint'][:8]}"


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def success_by_stage(report: dict[str, Any], path: Path) -> None:
    results, suites = report["results"], report["suites"]
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(results) * max(1, len(suites)) ** 0.5), 4))
    width = 0.8 / len(suites)
    for j, suite in enumerate(suites):
        xs = [i + (j - (len(suites) - 1) / 2) * width for i in range(len(results))]
        m = [r["suites"][suite]["success"] for r in results]
        ys = [x["value"] for x in m]
        # max(0, ...): an interval end can sit a rounding error inside its point estimate.
        err = [[max(0.0, y - x["lo"]) for y, x in zip(ys, m, strict=True)],
               [max(0.0, x["hi"] - y) for y, x in zip(ys, m, strict=True)]]  # fmt: skip
        colors = [STAGE_COLORS.get(r["stage"], "#607d8b") for r in results]
        alpha = 1 - 0.6 * j / max(1, len(suites) - 1)  # from 1 to 0.4, however many suites
        ax.bar(xs, ys, width * 0.9, yerr=err, capsize=4, color=colors, edgecolor="black", alpha=alpha)
        for x, y, mm in zip(xs, ys, m, strict=True):
            ax.text(x, mm["hi"] + 0.015, f"{y:.2f}", ha="center", va="bottom", fontsize=8)  # above its CI bar
            if len(suites) > 1:  # which bar is which suite, written on the bar
                ax.text(x - width * 0.25, 0.015, suite, ha="center", va="bottom", rotation=90, fontsize=7)
        if "pass_at_k" in results[0]["suites"][suite]:
            pk = [r["suites"][suite]["pass_at_k"]["value"] for r in results]
            k = results[0]["suites"][suite]["pass_at_k"]["k"]
            ax.scatter(xs, pk, marker="_", s=300, color="black", zorder=3, label=f"pass@{k}" if j == 0 else None)
    ax.set_xticks(range(len(results)), [_label(r) for r in results], fontsize=8)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("success (pass@1), 95% CI")
    seeds = report["seeds"]
    ax.set_title(f"Held-out success by checkpoint: {', '.join(suites)}; seeds {seeds}; T={report['temperature']}")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def rl_training(report: dict[str, Any], path: Path) -> None:
    rows = report["training"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    if not rows:
        top.text(0.5, 0.5, "no RL steps in this chain", ha="center", va="center", transform=top.transAxes)
    for stage in dict.fromkeys(r["stage"] for r in rows):
        xs = [r["global_step"] for r in rows if r["stage"] == stage]
        for ax, key in ((top, "reward"), (bottom, "malformed")):
            ys = [r.get(key) for r in rows if r["stage"] == stage]
            ax.plot(xs, ys, marker="o", ms=3, color=STAGE_COLORS.get(stage, "#607d8b"), label=stage)
    top.set_ylabel("mean reward")
    bottom.set_ylabel("malformed turn rate")
    bottom.set_xlabel("RL step (rl, then long_horizon)")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    top.set_title("RL training (rollout batches)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    if rows:
        top.legend(fontsize=8)
    _save(fig, path)


def turns_distribution(report: dict[str, Any], episodes: list[dict[str, Any]], path: Path) -> None:
    results = report["results"]
    max_turns = max([report.get("max_turns", 1)] + [e["turns"] for e in episodes])
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(1, len(results))
    for j, r in enumerate(results):
        mine = [e["turns"] for e in episodes if e["stage"] == r["stage"] and e["checkpoint"] == r["checkpoint"]]
        shares = [sum(t == k for t in mine) / max(1, len(mine)) for k in range(1, max_turns + 1)]
        xs = [k + (j - (len(results) - 1) / 2) * width for k in range(1, max_turns + 1)]
        ax.bar(xs, shares, width, color=STAGE_COLORS.get(r["stage"], "#607d8b"), label=r["stage"])
    ax.set_xticks(range(1, max_turns + 1))
    ax.set_xlabel("turns in the episode")
    ax.set_ylabel("share of episodes")
    ax.set_title("How many turns episodes took (max_turns cuts the right end)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def rl_strategy(report: dict[str, Any], path: Path) -> None:
    """Parallel-call share and turns per solved episode over RL steps, a line per suite where a step
    mixed suites (`<key>/<suite>` in the training rows), else one for the step's episodes."""
    rows = report["training"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    if not rows:
        top.text(0.5, 0.5, "no RL steps in this chain", ha="center", va="center", transform=top.transAxes)
    for ax, key in ((top, "parallel_share"), (bottom, "turns_per_solved")):
        suites = sorted({k.split("/", 1)[1] for r in rows for k in r if k.startswith(f"{key}/")})
        for name in [f"{key}/{s}" for s in suites] or [key]:
            xs = [r["global_step"] for r in rows if name in r]
            ax.plot(xs, [r[name] for r in rows if name in r], marker="o", ms=2, label=name.split("/", 1)[-1])
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    top.set_ylabel("share of turns with\nparallel calls")
    bottom.set_ylabel("turns per solved\nepisode")
    bottom.set_xlabel("RL step (rl, then long_horizon)")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    top.set_title("Tool strategy over RL steps (rollout batches)")
    _save(fig, path)


def write_plots(report: dict[str, Any], episodes: list[dict[str, Any]], out: Path) -> dict[str, str]:
    """Every PNG into `out`; returns {plot: file name}."""
    success_by_stage(report, out / PLOTS["success"])
    rl_training(report, out / PLOTS["training"])
    turns_distribution(report, episodes, out / PLOTS["turns"])
    rl_strategy(report, out / PLOTS["strategy"])
    return PLOTS
