"""Where RL's episodes come from: groups of harness episodes, sampled in lockstep.

`run_group` is the one way episodes run batched (one generate per turn of the whole group), shared by
the local rollout source, the Ray environment workers (harnessrl/rl/fleet.py) and eval:

    each episode   runs in a thread of its own, as plain sequential harness code (run_task); its
                   policy renders the conversation and waits for its next turn
    this thread    waits until every live episode has asked for a turn (the slow ones are still
                   running tools), samples them all in one `generate` call, and hands the turns back

The batch is the same set in the same order on every run, so seeded sampling gives the same
trajectories, while generation costs one batched call per turn instead of one per episode.

A rollout source runs groups with the policy's current weights and hands them back as they finish.
The RL loop (harnessrl/rl/loop.py) talks to it in five calls, so the same loop runs in sync mode
(`LocalRollouts`, in this process) and async mode (`fleet.RayRollouts`, on Ray):

    submit(task, seed)       queue one group of `group_size` episodes of `task`
    ready(n)                 block until n groups are done; return them
    publish(version, model)  the trainer's new weights, for every episode sampled from now on
    interrupts()             rollout batches cut short by new weights so far (hf engine, async)
    close()                  stop the engines and workers
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from torch import nn

from harnessrl.config import Budgets
from harnessrl.engines.hf import Completion
from harnessrl.engines.weights import weights_blob
from harnessrl.harness.episode import AssistantTurn, Trajectory, run_task
from harnessrl.model.prompts import PromptRenderer
from harnessrl.tasks.task import Task

# (requests as (prompt ids, room) pairs, seed) -> one completion per request, at most `room` tokens long.
# A rollout engine's `generate`: hf, vLLM, or a remote rollout worker's.
GenerateFn = Callable[[list[tuple[list[int], int]], int], list[Completion]]


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


class _Ask:
    """One episode's request for its next turn, and the slot its answer comes back in."""

    def __init__(self, slot: int, prompt: list[int], room: int) -> None:
        self.slot, self.prompt, self.room = slot, prompt, room
        self.turn: AssistantTurn | None = None
        self.error: BaseException | None = None
        self.answered = threading.Event()


class _EpisodePolicy:
    """An episode's policy inside run_group: render the conversation, ask for the turn, wait."""

    def __init__(self, slot: int, renderer: PromptRenderer, asks: queue.Queue) -> None:
        self.slot, self.renderer, self.asks = slot, renderer, asks

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int) -> AssistantTurn:
        prompt = self.renderer.prompt_ids(messages, tools)
        ask = _Ask(self.slot, prompt, self.renderer.room(prompt, max_tokens))
        self.asks.put(ask)
        ask.answered.wait()
        if ask.error is not None:
            raise RuntimeError("batched generation failed") from ask.error
        return ask.turn  # type: ignore[return-value]


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
    asks: queue.Queue[_Ask | int] = queue.Queue()  # an _Ask, or the slot of an episode that ended
    trajectories: list[Trajectory | None] = [None] * len(tasks)
    errors: list[BaseException] = []

    def episode(slot: int) -> None:
        try:
            trajectories[slot] = run_task(tasks[slot], suite_dir, _EpisodePolicy(slot, renderer, asks), budgets,
                                          uid=uids[slot], count_tokens=renderer.count, fmt=renderer.fmt)  # fmt: skip
        except BaseException as e:
            errors.append(e)
        finally:
            asks.put(slot)

    threads = [threading.Thread(target=episode, args=(i,), daemon=True) for i in range(len(tasks))]
    for t in threads:
        t.start()
    live, versions, batches = len(tasks), {}, 0
    while live:
        # Every live episode is either asking for a turn or has ended: then the batch is complete.
        waiting: list[_Ask] = []
        while len(waiting) < live:
            item = asks.get()
            if isinstance(item, int):
                live -= 1
            else:
                waiting.append(item)
        if not waiting:
            break
        waiting.sort(key=lambda a: a.slot)  # the same order on every run: seeded sampling repeats
        batches += 1
        try:
            turns = _sample(waiting, renderer, generate, seed * 1_000_003 + batches)
        except BaseException as e:  # every live episode is waiting: each ends on it, removing its workspace
            for a in waiting:
                a.error = e
                a.answered.set()
            for t in threads:
                t.join()
            raise
        for a, (turn, version) in zip(waiting, turns, strict=True):
            if version is not None:
                versions[a.slot] = min(version, versions.get(a.slot, version))
            a.turn = turn
            a.answered.set()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return trajectories, versions  # type: ignore[return-value]


def _sample(
    asks: list[_Ask], renderer: PromptRenderer, generate: GenerateFn, seed: int
) -> list[tuple[AssistantTurn, int | None]]:
    """One batched generate for every ask with room left: each turn, and the weights' version."""
    # A full context gets an empty turn, which the harness counts as malformed.
    out: list[tuple[AssistantTurn, int | None]] = [
        (AssistantTurn(text="", token_ids=[], logprobs=[], prompt_ids=a.prompt, finish="length"), None) for a in asks
    ]
    live = [k for k, a in enumerate(asks) if a.room > 0]
    if live:
        completions = generate([(asks[k].prompt, asks[k].room) for k in live], seed)
        for k, c in zip(live, completions, strict=True):
            a = asks[k]  # each request keeps to its own budget
            out[k] = renderer.turn(a.prompt, c.token_ids[: a.room], c.logprobs[: a.room], a.room), c.version
    return out


class LocalRollouts:
    """Sync mode: every pending group runs in one lockstep batch in this process, so each step trains
    on trajectories of exactly the weights being updated. `engine` is the `hf` engine over the
    trainer's own model (nothing to sync) or a vLLM engine with its own copy (`own_weights`), which
    gets the trainer's weights after every step."""

    def __init__(self, engine, renderer: PromptRenderer, suite_dir: Path, group_size: int, budgets: Budgets,
                 own_weights: bool, uid_base: int) -> None:  # fmt: skip
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
        # The groups share one batch, so one seed: made from every group's, not just the first's.
        seed = sum(s * 1_000_003**i for i, (_, s) in enumerate(pending)) % 2**31
        trajs, _ = run_group(episodes, self.suite_dir, self.budgets, self.renderer, self.engine.generate, seed, uids)
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
