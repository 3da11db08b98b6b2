"""Where RL's episodes come from: the rollout-source protocol, the local source, and `run_group`.

A rollout source runs groups of sandboxed episodes with the policy's current weights and hands them
back as they finish. The RL loop (harnessrl/rl/loop.py) talks to it in five calls, so the same loop
runs in sync mode (`LocalRollouts`, in this process) and async mode (`fleet.RayRollouts`, on Ray):

    submit(task, seed)       queue one group of `group_size` episodes of `task`
    ready(n)                 block until n groups are done; return them
    publish(version, model)  the trainer's new weights, for every episode sampled from now on
    interrupts()             rollout batches cut short by new weights so far (hf engine, async)
    close()                  stop the engines and workers

`run_group` is the one way episodes are run in lockstep (one batched generate per turn), shared by
the local source, the Ray environment workers and eval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from torch import nn

from harnessrl.engines.batched import GenerateFn, LockstepBatcher
from harnessrl.engines.weights import weights_blob
from harnessrl.harness.episode import Budgets, Trajectory
from harnessrl.model.prompts import PromptRenderer
from harnessrl.tasks import Task, run_task


@dataclass(frozen=True)
class Rollout:
    """One episode of a group, with the policy version that generated it."""

    task: Task
    trajectory: Trajectory
    version: int


class RolloutSource(Protocol):
    def submit(self, task: Task, seed: int) -> None: ...
    def ready(self, n: int) -> list[list[Rollout]]: ...
    def publish(self, version: int, model: nn.Module) -> None: ...
    def interrupts(self) -> int: ...
    def close(self) -> None: ...


def run_group(
    tasks: Sequence[Task],
    suite_dir: Path | str,
    budgets: Budgets,
    renderer: PromptRenderer,
    generate: GenerateFn,
    seed: int,
    uids: Sequence[int],
) -> tuple[list[Trajectory], dict[int, int]]:
    """One episode per task, all in lockstep, each in its own sandbox uid: the trajectories (in task
    order) and, per episode, the oldest policy version that sampled any of its turns."""
    batcher = LockstepBatcher(renderer, generate, seed)
    trajs = batcher.run(
        tasks,
        lambda task, policy, slot: run_task(
            task, suite_dir, policy, budgets, uid=uids[slot], count_tokens=renderer.count
        ),
    )
    return trajs, batcher.versions


class LocalRollouts:
    """Sync mode: every pending group runs in one lockstep batch in this process, so each step trains
    on trajectories of exactly the weights being updated. `engine` is the `hf` engine over the
    trainer's own model (nothing to sync) or a vLLM engine with its own copy (`own_weights`), which
    gets the trainer's weights after every step."""

    def __init__(
        self,
        engine,
        renderer: PromptRenderer,
        suite_dir: Path,
        group_size: int,
        budgets: Budgets,
        own_weights: bool,
        uid_base: int,
    ) -> None:
        self.engine, self.renderer, self.suite_dir = engine, renderer, suite_dir
        self.group_size, self.budgets, self.own_weights, self.uid_base = group_size, budgets, own_weights, uid_base
        self.version = 0
        self._pending: list[tuple[Task, int]] = []

    def submit(self, task: Task, seed: int) -> None:
        self._pending.append((task, seed))

    def ready(self, n: int) -> list[list[Rollout]]:
        pending, self._pending = self._pending[:n], self._pending[n:]
        episodes = [t for t, _ in pending for _ in range(self.group_size)]
        uids = range(self.uid_base, self.uid_base + len(episodes))
        trajs, _ = run_group(episodes, self.suite_dir, self.budgets, self.renderer, self.engine.generate,
                             pending[0][1], uids)  # fmt: skip
        k = self.group_size
        return [
            [Rollout(t, tr, self.version) for t, tr in zip(episodes[i : i + k], trajs[i : i + k], strict=True)]
            for i in range(0, len(episodes), k)
        ]

    def publish(self, version: int, model: nn.Module) -> None:
        if self.own_weights:
            self.engine.set_weights(version, weights_blob(model))
        self.version = version

    def interrupts(self) -> int:
        return 0  # weights change only between steps

    def close(self) -> None:
        if self.own_weights:
            self.engine.close()
