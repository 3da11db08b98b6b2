"""The long-horizon comparison: three ways to handle a full context, on the same held-out tasks, in
the same harness and at the same context budget, and the ceiling without one.

    truncation          the long-horizon stage's parent, dropping the oldest turns
    untrained_summary   the same parent, summarizing at the trigger (what SFT taught it)
    trained_summary     the long-horizon checkpoint, summarizing: its summaries trained by the reward
    no_budget           the long-horizon checkpoint with no context budget: nothing is ever dropped or
                        summarized, so no method at any budget should need to beat it

The harness is the long-horizon checkpoint's own (its harness.json): tools, turns, caps and context
settings; truncation changes only the context policy. Each method reports success with its 95%
interval, tokens per summary, compactions per episode, which budget ended the episodes, and the share
of turns with parallel calls (where reading several files at once pays).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

from harnessrl.config import Budgets, ContextConfig
from harnessrl.harness.episode import StopReason, Trajectory
from harnessrl.report.metrics import episode_row
from harnessrl.report.stats import bootstrap_ratio, wilson
from harnessrl.tasks.task import Task

METHODS = ("truncation", "untrained_summary", "trained_summary", "no_budget")


def method_budgets(trained: Budgets) -> dict[str, Budgets]:
    """Each method's budgets: the trained harness's, with truncation's own context policy, and none
    for the ceiling."""
    ctx = trained.context
    if ctx.policy != "summarize":
        raise ValueError(f"the long-horizon checkpoint's harness does not summarize (context policy {ctx.policy!r})")
    truncate = ContextConfig(policy="truncate", budget=ctx.budget)
    return {
        "truncation": trained.model_copy(update={"context": truncate}),
        "untrained_summary": trained,
        "trained_summary": trained,
        "no_budget": trained.model_copy(update={"context": ContextConfig()}),
    }


def method_result(trajs: list[Trajectory]) -> dict[str, Any]:
    """What one method did over its episodes."""
    n = len(trajs)
    ok = sum(bool(t.outcome.success) for t in trajs)
    lo, hi = wilson(ok, n)
    summaries = sum(t.counts.summaries for t in trajs)
    turns = [t.counts.turns for t in trajs]
    parallel = [t.counts.parallel_turns for t in trajs]
    plo, phi = bootstrap_ratio(parallel, turns)
    stops = [t.outcome.stop_reason for t in trajs]
    return {
        "episodes": n,
        "success": {"value": ok / max(1, n), "lo": lo, "hi": hi},
        "summary_tokens": sum(t.counts.summary_tokens for t in trajs) / max(1, summaries),  # per summary
        "summaries": summaries / max(1, n),
        "compactions": sum(len(t.compactions) for t in trajs) / max(1, n),
        "capped_summaries": sum(sum(r.capped for r in t.turns if r.kind == "summary") for t in trajs),
        "ended": {r: stops.count(r) for r in get_args(StopReason) if stops.count(r)},
        "parallel_share": {"value": sum(parallel) / max(1, sum(turns)), "lo": plo, "hi": phi},
    }


def example(traj: Trajectory, task: Task) -> dict[str, Any]:
    """One episode as a person reads it: the task, each segment as the policy saw it, each summary as
    written, and the outcome."""
    summaries = [t.text for t in traj.turns if t.kind == "summary"]
    return {
        "task_id": task.id,
        "instruction": task.instruction,
        "expected": task.check.answer,
        "segments": [[{"role": m["role"], "content": m["content"]} for m in seg] for seg in traj.segments()],
        "summaries": summaries,
        "answer": traj.outcome.final_answer,
        "success": bool(traj.outcome.success),
        "stop_reason": traj.outcome.stop_reason,
    }


def compare(
    parent: Path, trained: Path, trained_budgets: Budgets, tasks: list[Task], data_dir: Path, cfg, dtype: str, engine
) -> dict[str, Any]:
    """Run the methods; report.json's `long_horizon` object."""
    from harnessrl.lineage.manifest import read_manifest
    from harnessrl.report.episodes import checkpoint_trajectories

    budgets = method_budgets(trained_budgets)
    ckpts = {"truncation": parent, "untrained_summary": parent, "trained_summary": trained, "no_budget": trained}
    out: dict[str, Any] = {"tasks": len(tasks), "context": trained_budgets.context.model_dump(),
                           "max_turns": trained_budgets.max_turns}  # fmt: skip
    for method in METHODS:
        runs = checkpoint_trajectories(ckpts[method], tasks, data_dir, cfg, dtype, engine, budgets[method])
        trajs = [tr for _, _, tr in runs]
        out[method] = method_result(trajs) | {
            "checkpoint": read_manifest(ckpts[method])["id"],  # the lineage id, as every result has
            "path": str(ckpts[method]),
            "rows": [episode_row(tr, task, seed) for seed, task, tr in runs],
        }
        if method == "trained_summary":  # the first that compacted and succeeded, else that compacted
            ranked = sorted(runs, key=lambda r: (not r[2].compactions, not r[2].outcome.success))
            _, task, tr = ranked[0]
            out["example"] = example(tr, task)
    return out
