"""Validation: a candidate task is kept only if its check can tell a solution from no solution.

Both halves run exactly as an episode runs them, in the sandboxed harness (SWE-smith validates its
tasks the same way):
  - the untouched snapshot must fail: an episode whose policy stops at once, without a tool call;
  - the reference solution must pass: the scripted expert's episode (harnessrl/tasks/expert.py).
A dropped task is counted by reason, so `harnessrl tasks stats` can say what a source lost and why.
The expert's kept episodes are returned too: they are the SFT conversations, already paid for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harnessrl.config import Budgets
from harnessrl.harness.episode import AssistantTurn, Trajectory, run_tasks
from harnessrl.tasks.expert import expert_trajectories
from harnessrl.tasks.task import Task

# The turns an expert episode may take at validation: enough for the longest script (a rename
# across many files), never so many that a drifting script loops for long.
VALIDATION_BUDGETS = Budgets(max_turns=24)
SNAPSHOT_PASSES = "check passes on the untouched snapshot"
EXPERT_FAILS = "the expert's solution fails the check"


def _stop(messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int) -> AssistantTurn:
    """The do-nothing policy: answers at once, with no call and no answer a check could accept."""
    return AssistantTurn(text="(no change)")


def why_failed(traj: Trajectory) -> str:
    """A line on why the expert's episode failed: the checker's counts, or the first tool error."""
    d = traj.outcome.details
    errors = [c.output for t in traj.turns for c in t.calls if c.error]
    why = str(d.get("checker_error") or (errors[0] if errors else "") or (traj.turns[-1].text if traj.turns else ""))
    if "fail_to_pass" in d:
        f2p, p2p = d["fail_to_pass"], d["pass_to_pass"]
        why = f"FAIL_TO_PASS {f2p['passed']}/{f2p['total']}, PASS_TO_PASS {p2p['passed']}/{p2p['total']}; {why}"
    elif "failed" in d:
        why = f"{d['failed']} of {d['failed'] + d.get('passed', 0)} test functions failed; {why}"
    return why[:300]


def validate(
    tasks: list[Task],
    suite_dir: Path,
    workers: int = 4,
    on_done: Callable[[], None] | None = None,
    budgets: Budgets = VALIDATION_BUDGETS,
) -> tuple[list[Task], dict[str, Trajectory], dict[str, tuple[str, str]]]:
    """(kept tasks, the expert's trajectory of each kept task by id, each dropped task's id ->
    (reason, a line on why))."""
    dropped: dict[str, tuple[str, str]] = {}
    if not tasks:
        return [], {}, dropped
    untouched = run_tasks(tasks, suite_dir, lambda t: _stop, Budgets(max_turns=1), workers=workers)
    survivors = []
    for task, traj in zip(tasks, untouched, strict=True):
        if traj.outcome.success:
            dropped[task.id] = (SNAPSHOT_PASSES, "the check passes without any change")
        else:
            survivors.append(task)
    expert = expert_trajectories(survivors, suite_dir, workers=workers, budgets=budgets, on_done=on_done)
    kept, episodes = [], {}
    for task, traj in zip(survivors, expert, strict=True):
        if traj.outcome.success:
            kept.append(task)
            episodes[task.id] = traj
        else:
            dropped[task.id] = (EXPERT_FAILS, why_failed(traj))
    return kept, episodes, dropped


def mining_stats(candidates: int, kept: int, drops: Counter[str]) -> dict:
    """What mining.json records of one suite of one source. The expert's success counts the tasks
    whose snapshot failed the check, as it should: of those, the share the expert solved."""
    tried = kept + drops[EXPERT_FAILS]
    return {"candidates": candidates, "kept": kept, "dropped": dict(sorted(drops.items())),
            "expert_success": round(kept / tried, 4) if tried else None}  # fmt: skip


def reasons(dropped: dict[str, tuple[str, str]]) -> Counter[str]:
    """Drops counted by reason."""
    return Counter(reason for reason, _ in dropped.values())
