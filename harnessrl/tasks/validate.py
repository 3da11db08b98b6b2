"""Validation: a candidate task is kept only if its check passes the work it asks for, and nothing else.

Every part runs exactly as an episode runs it, in the sandboxed harness (SWE-smith validates its
tasks the same way):
  - the untouched snapshot must fail: an episode whose policy stops at once, without a tool call
    (an imported SWE row, id by id: each FAIL_TO_PASS id fails there and each PASS_TO_PASS id passes);
  - the reference solution must pass: the scripted expert's episode (harnessrl/tasks/expert.py);
  - no attack may pass: every scripted adversary of harnessrl/tasks/attacks.py that applies.
A dropped task is counted by reason (an attack's by its name), so `harnessrl tasks stats` can say
what a source lost and why. The expert's kept episodes are returned too: they are the SFT
conversations, already paid for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from harnessrl.config import Budgets
from harnessrl.harness.episode import Trajectory
from harnessrl.tasks.attacks import ATTACKS, accepted, run_attacks
from harnessrl.tasks.expert import expert_trajectories
from harnessrl.tasks.task import Task

# The turns an expert episode may take at validation: enough for the longest script (a rename
# across many files), never so many that a drifting script loops for long.
VALIDATION_BUDGETS = Budgets(max_turns=24)
SNAPSHOT_PASSES = "check passes on the untouched snapshot"
EXPERT_FAILS = "the expert's solution fails the check"
F2P_PASSES = "a FAIL_TO_PASS id passes before the fix"
P2P_FAILS = "a PASS_TO_PASS id fails before the fix"
ATTACK_PASSES = "attack passes"  # the reason is "attack passes: <attack>", one per attack


def ids_before_fix(task: Task, traj: Trajectory) -> tuple[str, str] | None:
    """For a swe row's untouched-snapshot episode: (reason, why) where an id already has its fixed
    state (a FAIL_TO_PASS id passing) or a PASS_TO_PASS id fails; None for any other task."""
    if task.check.kind != "swe":
        return None
    passed = set(traj.outcome.details.get("passed_ids", []))
    early = [i for i in task.check.fail_to_pass if i in passed]
    if early:
        return F2P_PASSES, f"passes on the snapshot with the test patch: {', '.join(early[:3])}"
    broken = [i for i in task.check.pass_to_pass if i not in passed]
    if broken:
        return P2P_FAILS, f"fails on the snapshot with the test patch: {', '.join(broken[:3])}"
    return None


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
    (reason, a line on why)). Every attack but "nothing" (the snapshot's run) runs on the tasks the
    expert solves."""
    dropped: dict[str, tuple[str, str]] = {}
    if not tasks:
        return [], {}, dropped
    survivors = []
    for _, task, traj in run_attacks(tasks, suite_dir, ["nothing"], workers=workers):
        if traj.outcome.success:
            dropped[task.id] = (SNAPSHOT_PASSES, "the check passes without any change")
        elif found := ids_before_fix(task, traj):
            dropped[task.id] = found
        else:
            survivors.append(task)
    expert = expert_trajectories(survivors, suite_dir, workers=workers, budgets=budgets, on_done=on_done)
    solved = []
    for task, traj in zip(survivors, expert, strict=True):
        if traj.outcome.success:
            solved.append(task)
        else:
            dropped[task.id] = (EXPERT_FAILS, why_failed(traj))
    passed = accepted(run_attacks(solved, suite_dir, [n for n in ATTACKS if n != "nothing"], workers=workers))
    for task_id, by in passed.items():
        dropped[task_id] = (f"{ATTACK_PASSES}: {by[0]}", f"accepted: {', '.join(by)}")
    kept = [t for t in solved if t.id not in passed]
    episodes = {t.id: traj for t, traj in zip(survivors, expert, strict=True) if t.id not in dropped}
    return kept, episodes, dropped


def mining_stats(candidates: int, kept: int, drops: Counter[str]) -> dict:
    """What mining.json records of one suite of one source. The expert's success counts the tasks
    whose snapshot failed the check, as it should: of those, the share the expert solved (a task an
    attack then passed was solved too)."""
    attacked = sum(n for reason, n in drops.items() if reason.startswith(ATTACK_PASSES))
    tried = kept + attacked + drops[EXPERT_FAILS]
    return {"candidates": candidates, "kept": kept, "dropped": dict(sorted(drops.items())),
            "expert_success": round((kept + attacked) / tried, 4) if tried else None}  # fmt: skip


def reasons(dropped: dict[str, tuple[str, str]]) -> Counter[str]:
    """Drops counted by reason."""
    return Counter(reason for reason, _ in dropped.values())
