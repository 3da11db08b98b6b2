"""Eval metrics of a suite: one compact row per episode, then each metric with its 95% interval.

A row keeps what the metrics and the report's plots need (not the conversation), so report.json
stays small and a report can be regenerated without re-running anything.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from harnessrl.harness.episode import Trajectory
from harnessrl.report.stats import bootstrap_ratio, pass_at_k, wilson
from harnessrl.tasks.task import Task

# name -> (what it is, how its interval is computed, whether higher is better). "rate": share of
# episodes (Wilson); "ratio": share of turns (bootstrap over episodes); "mean": per episode (bootstrap).
METRICS: dict[str, tuple[str, str, bool]] = {
    "success": ("pass@1: share of episodes solved", "rate", True),
    "pass_at_k": ("pass@k over the seeds: share of tasks solved at least once in k tries", "tasks", True),
    "turns": ("assistant turns per episode", "mean", False),
    "tool_calls": ("tool calls per episode", "mean", False),
    "parallel_share": ("share of turns with more than one call", "ratio", True),
    "malformed": ("share of turns that were malformed", "ratio", False),
    "clarify_rate": ("share of episodes that asked the user", "rate", False),
    "tokens": ("generated tokens per episode", "mean", False),
    "wall_s": ("wall seconds per episode", "mean", False),
}


def row_suite(task: Task) -> str:
    """The report's name for a task's suite: the suite, or `suite@source` for a task mined from a real
    source, so generated and real numbers are reported side by side, never pooled into one."""
    return task.suite if task.source is None else f"{task.suite}@{task.source}"


def episode_row(traj: Trajectory, task: Task, seed: int) -> dict[str, Any]:
    c = traj.counts
    return {
        "suite": row_suite(task),
        "task_id": traj.task_id,
        "seed": seed,
        "success": bool(traj.outcome.success),
        "stop_reason": traj.outcome.stop_reason,
        "turns": c.turns,
        "tool_calls": c.tool_calls,
        "parallel_turns": c.parallel_turns,
        "malformed_turns": c.malformed_turns,
        "asked": c.ask_user > 0,
        "tokens": c.tokens,
        "summaries": c.summaries,
        "summary_tokens": c.summary_tokens,
        "compactions": len(traj.compactions),
        "capped_turns": c.capped_turns,
        "wall_s": round(traj.wall_s, 4),
    }


def _interval(value: float, lo: float, hi: float) -> dict[str, float]:
    return {"value": value, "lo": lo, "hi": hi}


def suite_metrics(rows: list[dict[str, Any]], with_pass_at_k: bool) -> dict[str, Any]:
    """Every metric of METRICS over one suite's episodes, as {"value", "lo", "hi"}; pass@k only when
    asked (k > 1 seeds sampled at temperature > 0: greedy seeds repeat one another)."""
    n = len(rows)
    turns = [r["turns"] for r in rows]
    out: dict[str, Any] = {"episodes": n, "tasks": len({r["task_id"] for r in rows})}
    for name, (_, kind, _) in METRICS.items():
        if kind == "rate":
            hits = sum(bool(r["success" if name == "success" else "asked"]) for r in rows)
            out[name] = _interval(hits / max(1, n), *wilson(hits, n))
        elif kind == "ratio":
            num = [r["parallel_turns" if name == "parallel_share" else "malformed_turns"] for r in rows]
            out[name] = _interval(sum(num) / max(1, sum(turns)), *bootstrap_ratio(num, turns))
        elif kind == "mean":
            xs = [float(r[name]) for r in rows]
            out[name] = _interval(sum(xs) / max(1, n), *bootstrap_ratio(xs))
    if with_pass_at_k:
        by_task: dict[str, list[bool]] = defaultdict(list)
        for r in rows:
            by_task[r["task_id"]].append(bool(r["success"]))
        k = min(len(v) for v in by_task.values())
        per_task = [pass_at_k(len(v), sum(v), k) for v in by_task.values()]
        out["pass_at_k"] = _interval(sum(per_task) / len(per_task), *bootstrap_ratio(per_task)) | {"k": k}
    return out


def paired_success_diff(child: list[dict[str, Any]], parent: list[dict[str, Any]]) -> dict[str, float]:
    """child minus parent success over the episodes both ran (same suite, task and seed), with a
    bootstrap interval over those pairs: pairing removes the task-to-task spread from the comparison."""
    key = lambda r: (r["suite"], r["task_id"], r["seed"])
    before = {key(r): float(r["success"]) for r in parent}
    diffs = [float(r["success"]) - before[key(r)] for r in child if key(r) in before]
    if not diffs:
        return _interval(0.0, 0.0, 0.0) | {"pairs": 0}
    return _interval(sum(diffs) / len(diffs), *bootstrap_ratio(diffs)) | {"pairs": len(diffs)}
