"""Group-relative policy gradients over whole harness episodes, on the DeepSpeed engine.

`train_rl` reads in step order, as torchforge's GRPO app does:

    collect  groups of sandboxed episodes from the rollout source (harnessrl/rl/rollouts.py),
             dropping any older than `max_staleness` policy versions; with `refill_groups`, more
             groups while too few differ in reward (DAPO's dynamic sampling); with `curriculum:
             pass_rate`, prompts drawn by their running success rate (POLARIS)
    score    the shaped reward of every trajectory, then group-relative advantages
    update   `minibatches` clipped, importance-corrected policy-gradient steps on exactly the token
             ids the policy generated, against exactly the prompt ids it saw (objective.py), on this
             process's DeepSpeed engine or on `trainer_world_size` ranks (trainer_group.py)
    publish  the new weights to the rollout engines
    log      one metrics row; the hack monitors read it, and an alarm writes an incident
    save     every `checkpoint_every` steps the whole state (weights, optimizer, task sampler), so a
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
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import torch
from torch import nn

from harnessrl.config import RewardConfig, RLConfig, TrainConfig
from harnessrl.harness.episode import OVERLONG, StopReason, Trajectory
from harnessrl.metrics import MetricsWriter, read_metrics, restore, snapshot
from harnessrl.rewards.monitors import HackAlarm, HackMonitor
from harnessrl.rewards.shaped import reward_components, total
from harnessrl.rl.objective import Sample, completion_logprobs, group_advantages, pg_loss
from harnessrl.rl.rollouts import Rollout, RolloutSource
from harnessrl.tasks import Task
from harnessrl.train.engine import build_engine, load_state, optimizer_step, save_state


def turn_samples(traj: Trajectory, advantage: float) -> list[Sample]:
    """Each sampled turn of a trajectory, summaries included: the exact prompt ids the engine was
    given, the ids it generated and their behaviour logprobs. Nothing is rendered again, so what is
    trained is what was sampled, under any chat template."""
    return [
        Sample(prompt, turn.token_ids, turn.logprobs, advantage)
        for turn, prompt in zip(traj.turns, traj.prompts(), strict=True)
        if turn.token_ids and prompt is not None and turn.logprobs is not None
    ]


class Collector:
    """Keeps groups in flight on the rollout source and hands back one step's worth at a time.

    Sync keeps one step's groups in flight; async keeps enough that generation never waits for the
    trainer, and no more than the staleness bound lets the trainer use. Groups older than
    `max_staleness` versions are dropped and counted: the bound is a promise, not a hint."""

    def __init__(self, rollouts: RolloutSource, tasks: list[Task], cfg: RLConfig, rng: random.Random, seed: int,
                 batches: int, pass_rates: dict[str, float] | None = None) -> None:  # fmt: skip
        self.rollouts, self.tasks, self.cfg, self.rng, self.seed = rollouts, tasks, cfg, rng, seed
        self.batches = batches  # task draws so far: part of the resumable state
        self.pass_rates = dict(pass_rates or {})  # task id -> running success rate: resumable state too
        self.target = cfg.prompts_per_step * (1 if cfg.mode == "sync" else 1 + cfg.max_staleness)
        self.in_flight = 0

    def collect(self, step: int, want: int | None = None) -> tuple[list[list[Rollout]], int]:
        """`want` groups (`prompts_per_step` by default) fresh enough for `step`, and how many stale
        ones were dropped. Groups already in flight come first, so an async refill uses them."""
        want = want or self.cfg.prompts_per_step
        groups: list[list[Rollout]] = []
        dropped = 0
        while len(groups) < want:
            while self.in_flight < self.target:
                for task in self.draw():
                    self.rollouts.submit(task, self.seed * 10_007 + self.batches)
                    self.in_flight += 1
                self.batches += 1
            for g in self.rollouts.ready(want - len(groups)):
                self.in_flight -= 1
                if step - min(r.version for r in g) > self.cfg.max_staleness:
                    dropped += 1
                else:
                    groups.append(g)
        return groups, dropped

    def draw(self) -> list[Task]:
        """One batch of distinct prompts. `pass_rate` weighs each by p(1-p) of its running success
        rate p (0.5 before it is first seen): prompts always or never solved give uniform groups,
        which teach nothing, so those in between come up more often."""
        k = min(self.cfg.prompts_per_step, len(self.tasks))
        if self.cfg.curriculum == "uniform":
            return self.rng.sample(self.tasks, k)
        pool, chosen = list(self.tasks), []
        for _ in range(k):
            weights = [learnable(self.pass_rates.get(t.id, 0.5)) for t in pool]
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


def uniform(group: list[Rollout], reward: RewardConfig) -> bool:
    """Whether every episode of a group got the same reward: its advantages are all zero, so it
    teaches nothing. At success rate p a group of G is uniform with chance p^G + (1-p)^G."""
    return len({total(components(r, reward)) for r in group}) == 1


def components(r: Rollout, reward: RewardConfig) -> dict[str, float]:
    """An episode's shaped reward, by component (harnessrl/rewards/shaped.py)."""
    return reward_components(r.trajectory, reward, int(r.task.user is not None))


def collect_informative(
    collector: Collector, step: int, reward: RewardConfig, cfg: RLConfig
) -> tuple[list[list[Rollout]], int, int]:
    """One step's groups, the stale ones dropped, and the extra groups drawn (DAPO's dynamic sampling).

    While fewer than `prompts_per_step` groups differ in reward, up to `refill_groups` more are drawn.
    Uniform groups stay in the batch: their advantages are zero, so they add no gradient and no
    normalizer (update() trains only nonzero advantages), and the step's metrics see every episode."""
    groups, dropped = collector.collect(step)
    extra = 0
    while (missing := cfg.prompts_per_step - sum(not uniform(g, reward) for g in groups)) > 0:
        take = min(missing, cfg.refill_groups - extra)
        if take <= 0:
            break
        more, more_dropped = collector.collect(step, take)
        groups, dropped, extra = groups + more, dropped + more_dropped, extra + take
    return groups, dropped, extra


@dataclass
class Scored:
    """One step's episodes with their reward components, rewards and advantages."""

    rollouts: list[Rollout]
    components: list[dict[str, float]]
    rewards: torch.Tensor
    advantages: torch.Tensor
    masked: int  # overlong episodes whose gradient was zeroed
    uniform_share: float  # of the groups, those whose rewards were all equal: no gradient from them

    @property
    def trajectories(self) -> list[Trajectory]:
        return [r.trajectory for r in self.rollouts]


def score(groups: list[list[Rollout]], reward: RewardConfig, cfg: RLConfig) -> Scored:
    """Shaped rewards, then advantages within each group. Overlong masking zeroes an advantage after
    the group's baseline is taken, so the episode still counts towards what its group expected."""
    rollouts = [r for g in groups for r in g]
    comps = [components(r, reward) for r in rollouts]
    rewards = torch.tensor([total(c) for c in comps])
    adv = group_advantages(rewards, cfg.group_size, cfg.normalization)
    overlong = torch.tensor([r.trajectory.outcome.stop_reason in OVERLONG for r in rollouts])
    masked = int(overlong.sum()) if cfg.overlong_mask else 0
    if masked:
        adv = adv.masked_fill(overlong, 0.0)
    return Scored(rollouts, comps, rewards, adv, masked, sum(uniform(g, reward) for g in groups) / len(groups))


def trainer_config(cfg: RLConfig, context: int) -> TrainConfig:
    """The RL trainer is the supervised stages' DeepSpeed engine: one optimizer step per mini-batch."""
    return TrainConfig(
        steps=cfg.steps * cfg.minibatches,
        micro_batch_size=1,
        seq_len=context,
        lr=cfg.lr,
        schedule="constant",
        grad_clip=cfg.grad_clip,
        zero_stage=cfg.zero_stage,
    )


@dataclass
class Update:
    """What one step's updates measured."""

    grad_norm: float = 0.0  # the largest over the step's mini-batches, before clipping
    tokens: int = 0
    clipped: int = 0
    tis_truncated: int = 0
    tis_weight_sum: float = 0.0
    kl_sum: float = 0.0
    entropy_sum: float = 0.0  # the current policy's token entropy over the trained tokens, nats

    @classmethod
    def combine(cls, parts: list[Update]) -> Update:
        """The step's measures from its trainer ranks' shares: sums, and the one global grad norm."""
        total = cls(grad_norm=max(p.grad_norm for p in parts))
        for name in ("tokens", "clipped", "tis_truncated", "tis_weight_sum", "kl_sum", "entropy_sum"):
            setattr(total, name, sum(getattr(p, name) for p in parts))
        return total


def update(engine, model: nn.Module, reference: nn.Module | None, samples: list[Sample], cfg: RLConfig, pad: int,
           rank: int = 0, world: int = 1) -> Update:  # fmt: skip
    """`cfg.minibatches` optimizer steps over this step's samples (see objective.py for the loss).

    On `world` data-parallel ranks each mini-batch is split across them, every rank taking `rank::world`
    of it. Each normalizes by the whole mini-batch's tokens and scales by `world`, and DeepSpeed
    averages the ranks' gradients, so the update equals one rank's over the whole mini-batch."""
    stats = Update()
    if not samples:
        return stats
    chunks = [list(range(len(samples)))[k :: cfg.minibatches] for k in range(cfg.minibatches)]
    mine = [i for c in chunks for i in c[rank::world]]
    with torch.no_grad():
        # With one mini-batch the weights at the start of the step are the weights being updated, so
        # the proximal logprobs are the current ones, detached: no extra forward.
        part = [samples[i] for i in mine]
        proximal: dict[int, torch.Tensor] = {}
        if cfg.minibatches > 1:
            proximal = dict(zip(mine, completion_logprobs(model, part, pad, cfg.temperature), strict=True))
        ref: dict[int, torch.Tensor] = {}
        if reference is not None:
            ref = dict(zip(mine, completion_logprobs(reference, part, pad, cfg.temperature), strict=True))
    for chunk in (c for c in chunks if c):
        idx = chunk[rank::world]
        entropy: list[float] = []
        current = completion_logprobs(engine, [samples[i] for i in idx], pad, cfg.temperature, entropy=entropy)
        terms = [
            pg_loss(
                cur,
                proximal.get(i, cur.detach()),
                torch.tensor(samples[i].behaviour),
                samples[i].advantage,
                cfg.clip_low,
                cfg.clip_high,
                cfg.tis_cap,
                ref.get(i),
                cfg.kl_coef,
            )
            for cur, i in zip(current, idx, strict=True)
        ]
        # GRPO (DAPO's token-level form): the mean over the mini-batch's tokens. Dr.GRPO: a constant,
        # so a long answer's tokens weigh as much as a short one's and length carries no hidden bias.
        norm = len(chunk) * cfg.max_new_tokens
        if cfg.normalization == "grpo":
            norm = sum(len(samples[i].completion) for i in chunk)
        if terms:
            loss = sum(t.loss for t in terms)
        else:  # no share of this mini-batch: join the all-reduce with zeros, through a real forward so that
            # the gradient hooks fire in the model's own order (ZeRO-2 fills its buckets in that order)
            loss = completion_logprobs(engine, [samples[chunk[0]]], pad, cfg.temperature)[0].sum() * 0.0
        engine.backward(loss * world / norm)
        stats.grad_norm = max(stats.grad_norm, optimizer_step(engine, model))
        stats.tokens += sum(t.tokens for t in terms)
        stats.clipped += sum(t.clipped for t in terms)
        stats.tis_truncated += sum(t.tis_truncated for t in terms)
        stats.tis_weight_sum += sum(t.tis_weight_sum for t in terms)
        stats.kl_sum += sum(t.kl_sum for t in terms)
        stats.entropy_sum += sum(entropy)
    return stats


class LocalTrainer:
    """The RL trainer in this process: the DeepSpeed engine over the policy model itself. As rank
    `rank` of `world` (trainer_group.py) it trains on its share of every mini-batch."""

    def __init__(self, model: nn.Module, reference: nn.Module | None, cfg: RLConfig, pad: int, rank: int = 0,
                 world: int = 1) -> None:  # fmt: skip
        from harnessrl.train import distributed

        distributed.setup()
        self.model, self.reference, self.cfg, self.pad, self.rank, self.world = model, reference, cfg, pad, rank, world
        self.engine = build_engine(model, trainer_config(cfg, model.config.max_position_embeddings))

    def update(self, samples: list[Sample]) -> Update:
        self.model.train()
        stats = update(self.engine, self.model, self.reference, samples, self.cfg, self.pad, self.rank, self.world)
        self.model.eval()
        return stats

    def save(self, state_dir: Path, step: int, extra: dict) -> None:
        save_state(self.engine, state_dir, step, extra)

    def load(self, state_dir: Path) -> tuple[int, dict]:
        return load_state(self.engine, state_dir)

    def close(self) -> None:
        pass


def train_rl(
    model: nn.Module,
    tok,
    tasks: list[Task],
    cfg: RLConfig,
    reward: RewardConfig,
    out: Path,
    tag: str,
    seed: int,
    rollouts: RolloutSource,
    state_dir: Path | None = None,
    reference: nn.Module | None = None,
) -> dict:
    """Train `model` in place; metrics go to out/metrics.jsonl, hack incidents to out/incidents.jsonl.
    `rollouts` is where episodes come from (its creator closes it)."""
    if cfg.trainer_world_size > 1:  # DeepSpeed ranks as a Ray actor group; `model` mirrors rank 0's weights
        from harnessrl.rl.trainer_group import TrainerGroup

        trainer = TrainerGroup(model, reference, cfg, tok.pad_token_id, seed)
    else:
        trainer = LocalTrainer(model, reference, cfg, tok.pad_token_id)
    try:
        rng = random.Random(seed)
        start, extra = trainer.load(state_dir) if state_dir else (0, {})
        metrics_path = out / "metrics.jsonl"
        if start:  # keep the metrics and incidents of the steps the saved state holds
            print(f"[{tag}] resumed at step {start}/{cfg.steps} from {state_dir}", flush=True)
            rng.setstate(_as_rng_state(extra["rng"]))
            for name in ("metrics.jsonl", "incidents.jsonl"):
                restore(state_dir / name, out / name, start)
        monitor = HackMonitor(cfg.monitors, out / "incidents.jsonl", f"stages.{tag}.monitors")
        rollouts.publish(start, model)
        collector = Collector(rollouts, tasks, cfg, rng, seed, extra.get("batches", start), extra.get("pass_rates"))
        last: dict = read_metrics(metrics_path)[-1] if start else {}
        interrupts = rollouts.interrupts()
        with MetricsWriter(metrics_path) as log:
            for step in range(start, cfg.steps):
                t0 = time.perf_counter()
                groups, dropped, refilled = collect_informative(collector, step, reward, cfg)
                scored = score(groups, reward, cfg)
                collector.observe(groups)
                t_roll = time.perf_counter() - t0

                samples = [
                    s
                    for r, a in zip(scored.rollouts, scored.advantages.tolist(), strict=True)
                    if a != 0.0 or cfg.kl_coef > 0  # a zero advantage moves nothing but the KL term
                    for s in turn_samples(r.trajectory, a)
                ]
                stats = trainer.update(samples)
                rollouts.publish(step + 1, model)

                hack, incidents = monitor.update(step + 1, scored.trajectories, scored.components,
                                                 [int(r.task.user is not None) for r in scored.rollouts])  # fmt: skip
                now = rollouts.interrupts()
                last = step_metrics(step, scored, stats, dropped, refilled, now - interrupts, t_roll,
                                    time.perf_counter() - t0)  # fmt: skip
                last |= hack
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
                    trainer.save(state_dir, step + 1, {"rng": rng.getstate(), "batches": collector.batches,
                                                       "pass_rates": collector.pass_rates})  # fmt: skip
        return last
    finally:
        trainer.close()


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
        **{f"ended/{reason}": stops.count(reason) / n for reason in get_args(StopReason)},
        **{f"reward/{k}": sum(c[k] for c in scored.components) / n for k in scored.components[0]},
        "grad_norm": stats.grad_norm,
        "clip_frac": stats.clipped / max(1, stats.tokens),
        "tis/weight": stats.tis_weight_sum / max(1, stats.tokens),
        "tis/truncated_frac": stats.tis_truncated / max(1, stats.tokens),
        "kl": stats.kl_sum / max(1, stats.tokens),
        "entropy": stats.entropy_sum / max(1, stats.tokens),  # per trained token: collapse shows here
        "trained_tokens": stats.tokens,
        "wait_s": wait_s,
        "step_s": step_s,
        "tokens_per_s": generated / step_s,
        "episodes_per_s": n / step_s,
    }


def _as_rng_state(saved) -> tuple:
    """random.getstate() comes back from a checkpoint with its inner tuple as a list."""
    version, internal, gauss = saved
    return version, tuple(internal), gauss
