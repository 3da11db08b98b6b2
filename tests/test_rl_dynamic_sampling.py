"""Against uniform groups: DAPO's dynamic sampling (while too few groups of a step differ in reward,
more are drawn, up to a cap) and a pass-rate curriculum (prompts neither always nor never solved are
drawn more often)."""

from __future__ import annotations

import random

from harnessrl.config import Budgets, RewardConfig, compose
from harnessrl.harness.episode import Counts, Outcome, Trajectory
from harnessrl.rl.loop import Collector, score
from harnessrl.rl.rollouts import Rollout
from harnessrl.tasks.task import Check, Solution, Task


def task(i: int) -> Task:
    return Task(id=f"t{i}", suite="lookup", split="train", repo="r", instruction="q", tools=[],
                check=Check(kind="answer", answer="1"), solution=Solution(kind="value"))  # fmt: skip


TASKS = [task(i) for i in range(4)]


class ScriptedSource:
    """A rollout source whose k-th submitted group succeeds on the episodes `script[k]` says."""

    def __init__(self, script: list[list[bool]]) -> None:
        self.script, self.queue, self.submitted = script, [], 0

    def submit(self, task: Task, seed: int) -> None:
        outcomes = self.script[self.submitted % len(self.script)]
        self.submitted += 1
        self.queue.append([Rollout(task, trajectory(ok), 0) for ok in outcomes])

    def ready(self, n: int) -> list[list[Rollout]]:
        out, self.queue = self.queue[:n], self.queue[n:]
        return out


def trajectory(success: bool) -> Trajectory:
    return Trajectory(task_id="t", messages=[], opening=2, tools=[], turns=[], counts=Counts(turns=2),
                      outcome=Outcome(stop_reason="final", success=success), budgets=Budgets(), wall_s=0,
                      started_at=0)  # fmt: skip


def cfg(refill: int):
    overrides = ["recipe=tiny_smoke", "stages.rl.group_size=2", "stages.rl.prompts_per_step=2"]
    return compose([*overrides, f"stages.rl.refill_groups={refill}"]).stages.rl


MIXED, FAILED = [True, False], [False, False]


def test_uniform_groups_are_refilled_until_enough_differ() -> None:
    # Groups come as: failed, mixed | failed, failed, mixed, ...: two informative ones after 5 groups.
    source = ScriptedSource([FAILED, MIXED, FAILED, FAILED, MIXED, MIXED])
    c = cfg(refill=4)
    collector = Collector(source, TASKS, c, RewardConfig(), random.Random(0), 0)
    groups, dropped, extra = collector.collect_informative(0)
    assert (len(groups), dropped, extra) == (5, 0, 3)
    scored = score(groups, c)
    assert scored.uniform_share == 3 / 5
    assert scored.advantages.view(-1, 2)[[0, 2, 3]].abs().sum() == 0  # uniform: no gradient
    assert collector.groups == 6  # groups are counted (each seeds its own), so a resumed run goes on from there


def test_the_refill_is_capped_and_off_by_default() -> None:
    source = ScriptedSource([FAILED])
    capped = cfg(refill=3)
    groups, _, extra = Collector(source, TASKS, capped, RewardConfig(), random.Random(0), 0).collect_informative(0)
    assert (len(groups), extra) == (5, 3)  # never more than prompts_per_step + refill_groups
    off = cfg(refill=0)
    groups, _, extra = Collector(
        ScriptedSource([FAILED]), TASKS, off, RewardConfig(), random.Random(0), 0
    ).collect_informative(0)
    assert (len(groups), extra) == (2, 0)
    assert score(groups, off).uniform_share == 1.0


def test_the_pass_rate_curriculum_favours_prompts_in_between() -> None:
    c = cfg(refill=0).model_copy(update={"curriculum": "pass_rate", "prompts_per_step": 1})
    collector = Collector(ScriptedSource([MIXED]), TASKS, c, RewardConfig(), random.Random(0), 0)
    for t, outcome in zip(TASKS, [MIXED, FAILED, [True, True], MIXED], strict=True):
        for _ in range(4):  # four groups each: rates near 0.5, 0, 1 and 0.5
            collector.observe([[Rollout(t, trajectory(ok), 0) for ok in outcome]])
    assert collector.pass_rates["t1"] < 0.05 < 0.95 < collector.pass_rates["t2"]
    drawn = [collector.draw()[0].id for _ in range(400)]
    counts = {t.id: drawn.count(t.id) for t in TASKS}
    assert min(counts["t0"], counts["t3"]) > 3 * max(counts["t1"], counts["t2"]) > 0  # favoured, never starved
    uniform = Collector(ScriptedSource([MIXED]), TASKS, cfg(refill=0), RewardConfig(), random.Random(0), 0)
    assert uniform.pass_rates == {} and len(uniform.draw()) == 2  # off by default: rng.sample as before
