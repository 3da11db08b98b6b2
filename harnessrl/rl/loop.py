"""Group-relative policy gradients over whole harness episodes: the RL loop.

`train_rl` reads in step order, as torchforge's GRPO app does. One trajectory's path, task to loss:

    draw      a batch of tasks (`Collector.draw`; with `curriculum: pass_rate`, by their running
              success rate, as POLARIS does)
    roll out  each task as a group of sandboxed episodes on the rollout source (rollouts.py: the
              harness's run_task, its turns sampled in one batch per turn), dropping groups older than
              `max_staleness` policy versions; with `refill_groups`, more groups while too few differ
              in reward (DAPO's dynamic sampling)
    score     the shaped reward of every episode, once, as it arrives: stored on its trajectory, where
              the advantages, the metrics and the hack monitors read it; then group-relative advantages
    update    every sampled turn becomes a sample (the exact prompt ids it saw, the ids it generated,
              their behaviour logprobs, the trajectory's advantage) and the trainer takes one
              clipped, importance-corrected policy-gradient step on them (trainer.py)
    publish   the new weights to the rollout engines
    log       one metrics row; the hack monitors read the trajectories, and an alarm writes an incident
    save      every `checkpoint_every` steps the whole state (weights, optimizer, task sampler), so a
              killed run resumes losing at most the steps since

A long episode is several context segments (a summary ends each: harnessrl/harness/context.py).
Every sampled turn of every segment, summaries included, is a training sample on its own segment's
prompt, and every one shares the trajectory's advantage: the final outcome is what trains a summary
(Cursor's self-summarization, ReSum-GRPO's broadcast advantage). With `overlong_mask`, an episode
that ran out of a budget instead of answering gets no gradient (SUPO's overlong masking), so the
policy is not taught to summarize, or search, forever.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import torch
from torch import nn

from harnessrl.config import RewardConfig, RLConfig
from harnessrl.harness.episode import OVERLONG, StopReason, Trajectory
from harnessrl.harness.formats import CLASSES
from harnessrl.metrics import MetricsWriter, read_metrics, restore, snapshot
from harnessrl.rewards.monitors import HackAlarm, HackMonitor
from harnessrl.rl.rollouts import Rollout, RolloutSource
from harnessrl.rl.trainer import Sample, Trainer, Update
from harnessrl.tasks.task import Task


def train_rl(
    model: nn.Module,
    tasks: list[Task],
    cfg: RLConfig,
    reward: RewardConfig,
    out: Path,
    tag: str,
    seed: int,
    rollouts: RolloutSource,
    trainer: Trainer,
    state_dir: Path | None = None,
) -> dict:
    """Train `model` in place; metrics go to out/metrics.jsonl, hack incidents to out/incidents.jsonl.
    `rollouts` is where episodes come from and `trainer` what updates `model`; their creator closes
    both. Returns the last step's metrics."""
    rng = random.Random(seed)
    start, extra = trainer.load(state_dir) if state_dir else (0, {})
    metrics_path = out / "metrics.jsonl"
    if start:  # keep the metrics and incidents of the steps the saved state holds
        print(f"[{tag}] resumed at step {start}/{cfg.steps} from {state_dir}", flush=True)
        rng.setstate(_as_rng_state(extra["rng"]))
        for name in ("metrics.jsonl", "incidents.jsonl"):
            restore(state_dir / name, out / name, start)
    monitor = HackMonitor(cfg.monitors, out / "incidents.jsonl", f"stages.{tag}.monitors")
    monitor.restore(extra.get("monitor", {}))  # a resumed run judges against the same first steps
    rollouts.publish(start, model)
    collector = Collector(rollouts, tasks, cfg, reward, rng, seed, extra.get("groups", 0), extra.get("pass_rates"))
    last: dict = read_metrics(metrics_path)[-1] if start else {}
    interrupts = rollouts.interrupts()
    with MetricsWriter(metrics_path) as log:
        for step in range(start, cfg.steps):
            t0 = time.perf_counter()
            groups, dropped, refilled = collector.collect_informative(step)
            scored = score(groups, cfg, drop_malformed=reward.malformed_policy == "drop")
            collector.observe(groups)
            t_roll = time.perf_counter() - t0

            samples = [
                s
                for r, a in zip(scored.rollouts, scored.advantages.tolist(), strict=True)
                if a != 0.0 or cfg.kl_coef > 0  # a zero advantage moves nothing but the KL term
                for s in pack(turn_samples(r.trajectory, a, cfg.train_summaries))
            ]
            stats = trainer.update(samples)
            rollouts.publish(step + 1, model)

            hack, incidents = monitor.check(
                step + 1, scored.trajectories, [questions_needed(r) for r in scored.rollouts]
            )
            now = rollouts.interrupts()
            last = step_metrics(step, scored, stats, dropped, refilled, now - interrupts, t_roll,
                                time.perf_counter() - t0) | hack  # fmt: skip
            interrupts = now
            log.write(last)
            print(
                f"[{tag}] step {step + 1}/{cfg.steps} reward {last['reward']:.3f} success {last['success']:.2f} "
                f"malformed {last['malformed']:.2f} turns {last['turns']:.1f} staleness {last['staleness']:.2f} "
                f"{last['episodes_per_s']:.1f} episodes/s {last['tokens_per_s']:,.0f} tok/s",
                flush=True,
            )
            for inc in incidents:
                print(f"[{tag}] hack alarm: {inc['message']}", flush=True)
            if monitor.should_stop:
                raise HackAlarm(monitor.incidents[-1])
            if state_dir and (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
                for name in ("metrics.jsonl", "incidents.jsonl"):
                    snapshot(out / name, state_dir / name)  # before the state: see `snapshot`
                trainer.save(state_dir, step + 1, {"rng": rng.getstate(), "groups": collector.groups,
                                                   "pass_rates": collector.pass_rates, "monitor": monitor.state()})  # fmt: skip
    return last


# ----------------------------------------------------------------------------- draw and roll out


class Collector:
    """Keeps groups in flight on the rollout source and hands back one step's worth at a time, each
    episode scored as it arrives.

    Sync keeps one step's groups in flight; async keeps enough that generation never waits for the
    trainer, and no more than the staleness bound lets the trainer use. Groups older than
    `max_staleness` versions are dropped and counted: the bound is a promise, not a hint."""

    def __init__(self, rollouts: RolloutSource, tasks: list[Task], cfg: RLConfig, reward: RewardConfig,
                 rng: random.Random, seed: int, groups: int = 0, pass_rates: dict[str, float] | None = None) -> None:  # fmt: skip
        self.rollouts, self.tasks, self.cfg, self.reward, self.rng, self.seed = rollouts, tasks, cfg, reward, rng, seed
        self.groups = groups  # groups submitted so far, which numbers each group's seed: resumable state
        self.pass_rates = dict(pass_rates or {})  # task id -> running success rate: resumable state too
        self.target = cfg.prompts_per_step * (1 if cfg.mode == "sync" else 1 + cfg.max_staleness)
        self.in_flight = 0
        # Each prompt's weight in a draw: its suite's share of the mix, spread over the suite's prompts.
        per_suite = Counter(t.suite for t in tasks)
        self.weight = {t.id: cfg.mix.get(t.suite, 0.0) / per_suite[t.suite] for t in tasks}

    def collect(self, step: int, want: int | None = None) -> tuple[list[list[Rollout]], int]:
        """`want` groups (`prompts_per_step` by default) fresh enough for `step`, and how many stale
        ones were dropped. Groups already in flight come first, so an async refill uses them."""
        want = want or self.cfg.prompts_per_step
        groups: list[list[Rollout]] = []
        dropped = 0
        while len(groups) < want:
            while self.in_flight < self.target:
                for task in self.draw():
                    # The one place a group's seed is made: distinct per group, also for one task twice.
                    self.rollouts.submit(task, self.seed * 10_007 + self.groups)
                    self.groups += 1
                    self.in_flight += 1
            for g in self.rollouts.ready(want - len(groups)):
                self.in_flight -= 1
                if step - min(r.version for r in g) > self.cfg.max_staleness:
                    dropped += 1
                    continue
                for r in g:
                    r.trajectory.reward_components = reward_components(r.trajectory, self.reward, questions_needed(r))
                groups.append(g)
        return groups, dropped

    def collect_informative(self, step: int) -> tuple[list[list[Rollout]], int, int]:
        """One step's groups, the stale ones dropped, and the extra groups drawn (DAPO's dynamic sampling).

        While fewer than `prompts_per_step` groups differ in reward, up to `refill_groups` more are
        drawn. Uniform groups stay in the batch: their advantages are zero, so they add no gradient and
        no normalizer (the trainer trains only nonzero advantages), and the step's metrics see every
        episode."""
        groups, dropped = self.collect(step)
        extra = 0
        while (missing := self.cfg.prompts_per_step - sum(not uniform(g) for g in groups)) > 0:
            take = min(missing, self.cfg.refill_groups - extra)
            if take <= 0:
                break
            more, more_dropped = self.collect(step, take)
            groups, dropped, extra = groups + more, dropped + more_dropped, extra + take
        return groups, dropped, extra

    def draw(self) -> list[Task]:
        """One batch of distinct prompts, each suite drawn by its weight in `mix`. `pass_rate` also
        weighs each prompt by p(1-p) of its running success rate p (0.5 before it is first seen):
        prompts always or never solved give uniform groups, which teach nothing, so those in between
        come up more often."""
        k = min(self.cfg.prompts_per_step, len(self.tasks))
        if self.cfg.curriculum == "uniform" and len(self.cfg.mix) == 1:
            return self.rng.sample(self.tasks, k)  # every prompt weighs the same: a plain sample
        pool, chosen = list(self.tasks), []
        for _ in range(k):
            weights = [self.weight[t.id] for t in pool]
            if self.cfg.curriculum == "pass_rate":
                weights = [w * learnable(self.pass_rates.get(t.id, 0.5)) for w, t in zip(weights, pool, strict=True)]
            chosen.append(pool.pop(self.rng.choices(range(len(pool)), weights)[0]))
        return chosen

    def observe(self, groups: list[list[Rollout]]) -> None:
        """Move each prompt's running success rate halfway to its latest group's."""
        for g in groups:
            share = sum(bool(r.trajectory.outcome.success) for r in g) / len(g)
            old = self.pass_rates.get(g[0].task.id, 0.5)
            self.pass_rates[g[0].task.id] = old + 0.5 * (share - old)


def learnable(p: float) -> float:
    """A prompt's curriculum weight: highest at p = 0.5, never zero, so no prompt is starved."""
    return p * (1 - p) + 0.01


# ----------------------------------------------------------------------------- score


def reward_components(traj: Trajectory, w: RewardConfig, questions_needed: int = 0) -> dict[str, float]:
    """A trajectory's reward as named, weighted components, each logged.

    outcome     the task's checker (run code or compare state)
    malformed   per malformed turn: an explicit negative, never a dropped sample (Composer's lesson:
                dropping them taught the policy to emit broken calls on hard tasks). The ablation,
                reward.malformed_policy=drop, takes such episodes out of the gradient instead (`score`)
    wrong       per episode that ended on a wrong answer or an unfinished task (0 by default: failing
                is its own cost). With `clarify` at 0 it is the second hack's quirk: a question, which
                ends the episode, costs nothing, a risky answer may (conf/reward/clarify_quirk.yaml)
    turns       per turn: fewer needless turns
    tokens      per 1k generated tokens: sensible length
    parallel    per turn whose calls ran in parallel; calls in one turn are independent by the protocol
    clarify     per clarifying question beyond what the task needs (the other reported hack)
    summary_tokens  per 1k tokens of the policy's own summaries: a summary should carry what the
                task needs, not restate everything (long-horizon RL)
    overlong    per episode that ran out of a budget (turns, tokens, context, summaries) instead of
                answering: an explicit negative, where SUPO's masking (`overlong_mask`) gives none

    Efficiency (turns, tokens, parallel, summary_tokens) is a property of a solution, so it counts only
    when the task was solved. Charged on failures too, it pays the policy to give up: a one-turn guess
    would beat a search that missed, and in a group that all failed, GRPO's normalization turns that
    small gap into a full advantage for guessing."""
    c, solved = traj.counts, float(bool(traj.outcome.success))
    ended = traj.outcome.stop_reason in ("final", "end_tool")
    return {
        "outcome": w.outcome * solved,
        "malformed": w.malformed * c.malformed_turns,
        "wrong": w.wrong * (ended and not solved),
        "turns": w.turns * c.turns * solved,
        "tokens": w.tokens * c.tokens / 1000 * solved,
        "parallel": w.parallel * c.parallel_turns * solved,
        "clarify": w.clarify * max(0, c.ask_user - questions_needed),
        "summary_tokens": w.summary_tokens * c.summary_tokens / 1000 * solved,
        "overlong": w.overlong * (traj.outcome.stop_reason in OVERLONG),
    }


def questions_needed(r: Rollout) -> int:
    """Clarifying questions the task needs: one where it has a user to answer it."""
    return int(r.task.user is not None)


def episode_reward(traj: Trajectory) -> float:
    """An episode's reward: the sum of the components its scoring stored on it."""
    return sum(traj.reward_components.values())


def uniform(group: list[Rollout]) -> bool:
    """Whether every episode of a group got the same reward: its advantages are all zero, so it
    teaches nothing. At success rate p a group of G is uniform with chance p^G + (1-p)^G."""
    return len({episode_reward(r.trajectory) for r in group}) == 1


def group_advantages(
    rewards: torch.Tensor, group_size: int, normalization: str = "grpo", keep: torch.Tensor | None = None
) -> torch.Tensor:
    """r minus its group's mean, for rewards laid out group by group. GRPO also divides by the group's
    std; Dr.GRPO does not, since that division up-weights groups whose rewards barely differ. Episodes
    where `keep` is False get 0 and are left out of their group's mean and std, as if never sampled.
    A group the size of the batch is the batch baseline (RLConfig.baseline)."""
    g = rewards.view(-1, group_size)
    k = torch.ones_like(g) if keep is None else keep.view_as(g).to(g.dtype)
    n = k.sum(dim=1, keepdim=True)
    mean = (g * k).sum(dim=1, keepdim=True) / n.clamp(min=1)
    centred = (g - mean) * k
    if normalization == "grpo":  # the unbiased std, as torch.std; one kept episode has none and gets 0
        std = ((centred**2).sum(dim=1, keepdim=True) / (n - 1).clamp(min=1)).sqrt()
        centred = centred / (std + 1e-4)
    return centred.view(-1)


@dataclass
class Scored:
    """One step's episodes with their rewards and advantages."""

    rollouts: list[Rollout]
    rewards: torch.Tensor
    advantages: torch.Tensor
    masked: int  # overlong episodes whose gradient was zeroed
    dropped_malformed: int  # episodes with a malformed turn left out, under reward.malformed_policy=drop
    uniform_share: float  # of the groups, those whose rewards were all equal: no gradient from them

    @property
    def trajectories(self) -> list[Trajectory]:
        return [r.trajectory for r in self.rollouts]


def malformed_classes(trajs: list[Trajectory]) -> dict[str, int]:
    """Malformed turns by class (unparseable, unclosed, unknown_tool, bad_arguments, ...), every class
    named (so each step logs the same metrics): a turn with two problems of one class counts once."""
    out = dict.fromkeys(CLASSES, 0)
    for tr in trajs:
        for turn in tr.turns:
            for kind in set(turn.classes):
                out[kind] = out.get(kind, 0) + 1
    return out


def score(groups: list[list[Rollout]], cfg: RLConfig, drop_malformed: bool = False) -> Scored:
    """Advantages from the rewards stored on the trajectories, against each group's mean or the whole
    step's (cfg.baseline).

    `drop_malformed` (reward.malformed_policy=drop) leaves every episode with a malformed turn out, of
    the gradient and of the baseline: the essay's first version, whose hack the ablation reproduces.
    Overlong masking instead zeroes an advantage after the baseline is taken, so the episode still
    counts towards what its group expected."""
    rollouts = [r for g in groups for r in g]
    rewards = torch.tensor([episode_reward(r.trajectory) for r in rollouts])
    broken = torch.tensor([r.trajectory.counts.malformed_turns > 0 for r in rollouts])
    keep = ~broken if drop_malformed else None
    size = cfg.group_size if cfg.baseline == "group" else len(rollouts)
    adv = group_advantages(rewards, size, cfg.normalization, keep)
    overlong = torch.tensor([r.trajectory.outcome.stop_reason in OVERLONG for r in rollouts])
    masked = int(overlong.sum()) if cfg.overlong_mask else 0
    if masked:
        adv = adv.masked_fill(overlong, 0.0)
    dropped = int(broken.sum()) if drop_malformed else 0
    return Scored(rollouts, rewards, adv, masked, dropped, sum(uniform(g) for g in groups) / len(groups))


# ----------------------------------------------------------------------------- update and log


def turn_samples(traj: Trajectory, advantage: float, train_summaries: bool = True) -> list[Sample]:
    """Each sampled turn of a trajectory, summaries included: the exact prompt ids the engine was
    given, the ids it generated and their behaviour logprobs. Nothing is rendered again, so what is
    trained is what was sampled, under any chat template. Without `train_summaries`, summary turns are
    left out: each is the last turn of its context segment (the next segment starts from it), so the
    rest of the episode trains exactly as it would with them."""
    return [
        Sample(prompt, turn.token_ids, turn.logprobs, advantage)
        for turn, prompt in zip(traj.turns, traj.prompts(), strict=True)
        if turn.token_ids
        and prompt is not None
        and turn.logprobs is not None
        and (train_summaries or turn.kind != "summary")
    ]


def pack(samples: list[Sample]) -> list[Sample]:
    """One trajectory's turn samples, in order, as few sequences as token in, token out allows: where a
    turn's prompt extends the sequence so far (the previous prompt, its completion, then the tool
    outputs and the next turn's opening), the turn joins it, and one forward pass trains the whole
    context segment. Per turn, each turn recomputes every token before it: O(turns^2) tokens for
    O(turns) new ones. A turn whose prompt does not extend it (a new segment after a summary, a
    template that re-renders history) starts a new sequence. Causal attention gives every token the
    context it had in its own turn, so the logprobs, and the loss, are the per-turn ones. (With
    `minibatches` > 1 the split is by sample, so a packed trajectory's turns share one mini-batch:
    the same tokens and weights, grouped otherwise.)"""
    out: list[Sample] = []
    for s in samples:
        last = out[-1] if out else None
        seen = [] if last is None else last.prompt + last.completion
        if last is None or s.advantage != last.advantage or s.prompt[: len(seen)] != seen:
            out.append(s)
            continue
        gap = s.prompt[len(seen) :]  # context the new turn saw: tool outputs, its own opening
        mask = last.sampled or (True,) * len(last.completion)
        out[-1] = Sample(last.prompt, last.completion + gap + s.completion, last.behaviour + s.behaviour,
                         last.advantage, mask + (False,) * len(gap) + (s.sampled or (True,) * len(s.completion)),
                         last.turns + s.turns)  # fmt: skip
    return out


def strategy_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """What the tool strategy looks like, of one set of episodes: the share of turns with parallel calls,
    turns per solved episode (nan when none was solved), the share of episodes with a malformed turn
    and the share that asked the user. The lessons (bench/lessons.py) read these per step."""
    solved = [t for t in trajs if t.outcome.success]
    return {
        "parallel_share": sum(t.counts.parallel_turns for t in trajs) / max(1, sum(t.counts.turns for t in trajs)),
        "turns_per_solved": sum(t.counts.turns for t in solved) / len(solved) if solved else float("nan"),
        "malformed_episodes": sum(t.counts.malformed_turns > 0 for t in trajs) / max(1, len(trajs)),
        "asked": sum(t.counts.ask_user > 0 for t in trajs) / max(1, len(trajs)),
    }


def per_suite_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """Success, turns, tool calls, malformed turns and the strategy metrics of each suite's episodes,
    under `<metric>/<suite>`, where a step mixes suites; a one-suite step's totals say it already."""
    by: dict[str, list[Trajectory]] = {}
    for t in trajs:
        by.setdefault(t.meta.get("suite", "?"), []).append(t)
    if len(by) < 2:
        return {}
    out = {}
    for suite, ts in sorted(by.items()):
        turns = sum(t.counts.turns for t in ts)
        out[f"episodes/{suite}"] = len(ts)
        out[f"success/{suite}"] = sum(bool(t.outcome.success) for t in ts) / len(ts)
        out[f"turns/{suite}"] = turns / len(ts)
        out[f"tool_calls/{suite}"] = sum(t.counts.tool_calls for t in ts) / len(ts)
        out[f"malformed/{suite}"] = sum(t.counts.malformed_turns for t in ts) / max(1, turns)
        out |= {f"{k}/{suite}": v for k, v in strategy_metrics(ts).items()}
    return out


def step_metrics(
    step: int,
    scored: Scored,
    stats: Update,
    dropped: int,
    refilled: int,
    interrupted: int,
    wait_s: float,
    step_s: float,
) -> dict:
    """One metrics.jsonl row: what the step's episodes did and what the update measured."""
    trajs = scored.trajectories
    n = len(trajs)
    counts = [tr.counts for tr in trajs]
    turns = sum(c.turns for c in counts)
    summaries = sum(c.summaries for c in counts)
    generated = sum(c.tokens for c in counts)
    stops = [tr.outcome.stop_reason for tr in trajs]
    return {
        "step": step + 1,
        "policy_version": step + 1,
        "staleness": sum(step - r.version for r in scored.rollouts) / n,
        "dropped_stale_groups": dropped,
        "uniform_groups": scored.uniform_share,
        "refill_groups": refilled,  # drawn beyond prompts_per_step by dynamic sampling
        "interrupted_batches": interrupted,  # rollout batches that took new weights mid-turn
        "reward": float(scored.rewards.mean()),
        "success": sum(bool(tr.outcome.success) for tr in trajs) / n,
        "malformed": sum(c.malformed_turns for c in counts) / max(1, turns + summaries),
        "turns": turns / n,
        "capped_turns": sum(c.capped_turns for c in counts) / max(1, turns + summaries),
        "summaries": summaries / n,
        "summary_tokens": sum(c.summary_tokens for c in counts) / max(1, summaries),
        "overlong": sum(s in OVERLONG for s in stops) / n,
        "overlong_masked": scored.masked,
        "dropped_malformed": scored.dropped_malformed,
        **strategy_metrics(trajs),
        **{f"ended/{reason}": stops.count(reason) / n for reason in get_args(StopReason)},
        # Which ways the malformed turns went wrong (a turn counts once per class it shows).
        **{f"malformed_class/{k}": v / max(1, turns + summaries) for k, v in malformed_classes(trajs).items()},
        **{f"reward/{k}": sum(t.reward_components[k] for t in trajs) / n for k in trajs[0].reward_components},
        **per_suite_metrics(trajs),
        "grad_norm": stats.grad_norm,
        "clip_frac": stats.clipped / max(1, stats.tokens),
        "tis/weight": stats.tis_weight_sum / max(1, stats.tokens),
        "tis/truncated_frac": stats.tis_truncated / max(1, stats.tokens),
        "kl": stats.kl_sum / max(1, stats.tokens),
        "entropy": stats.entropy_sum / max(1, stats.tokens),  # per trained token: collapse shows here
        "trained_tokens": stats.tokens,
        "trained_sequences": stats.sequences,
        "wait_s": wait_s,
        "step_s": step_s,
        "tokens_per_s": generated / step_s,
        "episodes_per_s": n / step_s,
    }


def _as_rng_state(saved) -> tuple:
    """random.getstate() comes back from a checkpoint with its inner tuple as a list."""
    version, internal, gauss = saved
    return version, tuple(internal), gauss
