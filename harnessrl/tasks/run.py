"""Running a task: its snapshot becomes a fresh workspace, the policy works in the sandbox, the task's
checker decides, the workspace goes away. This is the one call the SFT data builder, the RL rollouts
and eval share.
"""

from __future__ import annotations

import itertools
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harnessrl.harness.context import TokenCounter
from harnessrl.harness.episode import Budgets, Policy, Trajectory, run_episode
from harnessrl.harness.sandbox import Sandbox, SandboxLimits, create_workspace, remove_workspace
from harnessrl.harness.spec import system_prompt
from harnessrl.harness.tools import ToolContext, select
from harnessrl.tasks.checkers import make_checker
from harnessrl.tasks.task import Task

BASE_UID = 62000  # concurrent episodes get distinct sandbox uids, so process limits stay per episode


def prompt_messages(task: Task) -> list[dict[str, str]]:
    """The conversation an episode starts from (what run_episode builds), for engines that take messages."""
    return [{"role": "system", "content": system_prompt(task.tools)}, {"role": "user", "content": task.instruction}]


def run_task(
    task: Task,
    suite_dir: Path | str,
    policy: Policy,
    budgets: Budgets | None = None,
    work_dir: Path | str | None = None,
    uid: int = BASE_UID,
    limits: SandboxLimits | None = None,
    count_tokens: TokenCounter | None = None,
) -> Trajectory:
    """One episode of `task` with `policy`; the trajectory's outcome holds the checker's verdict.
    `count_tokens` is the policy's own context counter, for the budgets' context policy."""
    with tempfile.TemporaryDirectory(prefix="episode-", dir=work_dir) as tmp:
        ws = create_workspace(Path(suite_dir) / task.repo, Path(tmp) / "ws", owner_uid=uid)
        ctx = ToolContext(
            workspace=ws,
            sandbox=Sandbox(ws, limits or SandboxLimits(wall_s=60), uid=uid),
            ask_user=(lambda _q, answer=task.user: answer) if task.user is not None else None,
        )
        try:
            return run_episode(
                policy,
                task.instruction,
                select(task.tools),
                ctx,
                checker=make_checker(task),
                budgets=budgets,
                system_prompt=system_prompt(task.tools),
                task_id=task.id,
                meta={"suite": task.suite, "split": task.split},
                count_tokens=count_tokens,
            )
        finally:
            remove_workspace(ws)


def run_tasks(
    tasks: list[Task],
    suite_dir: Path | str,
    policy_for: Callable[[Task], Policy],
    workers: int = 4,
    budgets: Budgets | None = None,
    on_done: Callable[[], None] | None = None,
) -> list[Trajectory]:
    """Episodes of many tasks, `workers` at a time (threads: the work is in sandboxed subprocesses and
    the policy). Results keep task order. `policy_for(task)` gives each episode its policy; `on_done`,
    if given, is called after each episode (from its worker thread), e.g. to show progress."""
    slots = itertools.count()
    local = threading.local()

    def one(task: Task) -> Trajectory:
        if not hasattr(local, "uid"):
            local.uid = BASE_UID + next(slots)
        trajectory = run_task(task, suite_dir, policy_for(task), budgets, uid=local.uid)
        if on_done is not None:
            on_done()
        return trajectory

    if workers <= 1:
        return [one(t) for t in tasks]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, tasks))
