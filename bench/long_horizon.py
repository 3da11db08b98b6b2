"""Success against the context budget: truncation, untrained and trained summaries, at three budgets.

Takes a finished run of the default recipe (its long-horizon checkpoint and that checkpoint's parent)
and runs the eval's long-horizon comparison (harnessrl/report/long_horizon.py) at the trained budget
and at one smaller and one larger, moving the summary trigger with the budget. Prints the table side
by side and writes the plot.

    python bench/long_horizon.py RUN_DIR [--tasks 64] [--delta 64] [-o long_horizon_budget.png]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from harnessrl.config import EngineConfig, EvalConfig
from harnessrl.harness.spec import load_harness
from harnessrl.lineage.manifest import read_manifest
from harnessrl.report.heldout import load_heldout
from harnessrl.report.long_horizon import METHODS, compare


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path, help="a run directory of `harnessrl run` (the default recipe)")
    p.add_argument("--tasks", type=int, default=64, help="held-out long-horizon tasks (default: %(default)s)")
    p.add_argument("--delta", type=int, default=64, help="budget step in tokens (default: %(default)s)")
    p.add_argument("-o", "--output", type=Path, default=Path("long_horizon_budget.png"))
    args = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)

    trained = (args.run_dir / "checkpoints" / "long_horizon").resolve()
    parent = Path(read_manifest(trained)["parent"]["path"])
    harness = load_harness(trained)
    if harness is None:
        raise SystemExit(f"{trained}: no harness.json (run the default recipe first)")
    data = Path(json.loads((trained / "manifest.json").read_text())["datasets"]["data"]["path"])
    tasks = load_heldout(data, {"long_horizon": 1.0}, args.tasks)
    cfg = EvalConfig(mix={"long_horizon": 1.0}, seeds=[0], num_tasks=args.tasks, max_new_tokens=1)
    ctx = harness.budgets.context
    table: dict[int, dict] = {}
    for d in (-args.delta, 0, args.delta):
        context = ctx.model_copy(update={"budget": ctx.budget + d, "trigger": ctx.trigger + d})
        budgets = harness.budgets.model_copy(update={"context": context})
        table[ctx.budget + d] = compare(parent, trained, budgets, tasks, data, cfg, "float32", EngineConfig())
        row = table[ctx.budget + d]
        print(f"budget {ctx.budget + d:>5}: " + "  ".join(
            f"{m} {row[m]['success']['value']:.3f} ({row[m]['summary_tokens']:.0f} tok/summary)" for m in METHODS),
              flush=True)  # fmt: skip

    print(f"\n{'budget':>7} | " + " | ".join(f"{m:>17}" for m in METHODS) + " | trained / truncation")
    for budget, row in table.items():
        s = [row[m]["success"]["value"] for m in METHODS]
        ratio = f"{s[2] / s[0]:.2f}x" if s[0] else "inf" if s[2] else "-"
        print(f"{budget:>7} | " + " | ".join(f"{v:>17.3f}" for v in s) + f" | {ratio}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    budgets = list(table)
    for m in METHODS:
        ys = [table[b][m]["success"]["value"] for b in budgets]
        err = [[y - table[b][m]["success"]["lo"] for y, b in zip(ys, budgets, strict=True)],
               [table[b][m]["success"]["hi"] - y for y, b in zip(ys, budgets, strict=True)]]  # fmt: skip
        ax.errorbar(budgets, ys, yerr=err, marker="o", capsize=4, label=m)
    ax.set_xlabel("context budget (tokens)")
    ax.set_ylabel("held-out success, 95% CI")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Long-horizon success by context budget ({len(tasks)} tasks)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=110, metadata={"Software": None})
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
