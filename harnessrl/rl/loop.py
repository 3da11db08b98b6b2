"""Group-relative policy gradients over whole harness episodes, on the DeepSpeed engine.

Each step: pick tasks, run `group_size` sandboxed episodes of each with the current policy, score
every trajectory with the shaped reward, turn rewards into group-relative advantages, and take
`minibatches` clipped, importance-corrected policy-gradient updates on exactly the token ids the
policy generated (harnessrl/rl/objective.py). The hack monitors read every step; an alarm writes an
incident and, by config, stops the run. Every `checkpoint_every` steps the whole state (weights,
optimizer, task sampler) is saved, so a killed run resumes losing at most the steps since.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from harnessrl.config import RewardConfig, RLConfig, TrainConfig
from harnessrl.engines.batched import LockstepBatcher
from harnessrl.engines.policy import HFPolicy
from harnessrl.engines.weights import weights_blob
from harnessrl.harness.episode import Budgets, Trajectory
from harnessrl.metrics import MetricsWriter, read_metrics, restore, snapshot
from harnessrl.rewards.monitors import HackAlarm, HackMonitor
from harnessrl.rewards.shaped import reward_components, total
from harnessrl.rl.objective import Sample, completion_logprobs, group_advantages, pg_loss
from harnessrl.tasks import Task, run_task
from harnessrl.tasks.run import BASE_UID
from harnessrl.train.engine import build_engine, load_state, optimizer_step, save_state


@dataclass(frozen=True)
class Rollout:
    """One episode of a group, with the policy version that generated it."""

    task: Task
    trajectory: Trajectory
    version: int


class LocalRollouts:
    """Sync mode: every pending group runs in one lockstep batch in this process, so each step trains
    on trajectories of exactly the weights being updated. With no `engine` the trainer's own model
    generates (the `hf` engine, nothing to sync); a vLLM engine gets the new weights after each step.

    The async Ray fleet (harnessrl/rl/fleet.py) has the same methods, so the loop below is the same
    code in both modes: `submit` a task's group, wait for `ready` groups, `publish` new weights."""

    def __init__(self, model: nn.Module, tok, suite_dir: Path, cfg: RLConfig, budgets: Budgets, engine=None) -> None:
        self.model, self.tok, self.suite_dir, self.cfg, self.budgets = model, tok, suite_dir, cfg, budgets
        self.engine = engine
        self.version = 0
        self._pending: list[tuple[Task, int]] = []

    def submit(self, task: Task, seed: int) -> None:
        self._pending.append((task, seed))

    def ready(self, n: int) -> list[list[Rollout]]:
        pending, self._pending = self._pending[:n], self._pending[n:]
        group = [t for t, _ in pending for _ in range(self.cfg.group_size)]
        self.model.eval()
        batcher = LockstepBatcher(
            self.model,
            self.tok,
            self.cfg.temperature,
            self.cfg.max_new_tokens,
            pending[0][1],
            self.engine.generate if self.engine else None,
        )
        trajs = batcher.run(
            group, lambda task, policy, slot: run_task(task, self.suite_dir, policy, self.budgets, uid=BASE_UID + slot)
        )
        k = self.cfg.group_size
        return [
            [Rollout(t, tr, self.version) for t, tr in zip(group[i : i + k], trajs[i : i + k], strict=True)]
            for i in range(0, len(group), k)
        ]

    def interrupts(self) -> int:
        return 0  # weights change only between steps

    def publish(self, version: int, model: nn.Module) -> None:
        if self.engine:
            self.engine.set_weights(version, weights_blob(model))
        self.version = version

    def close(self) -> None:
        if self.engine:
            self.engine.close()


def turn_samples(traj: Trajectory, policy: HFPolicy, advantage: float) -> list[Sample]:
    """Each sampled turn of a trajectory: the prompt ids as the policy saw them, the ids it generated
    and their behaviour logprobs. Rendering the prefix again is drift-free (render_ids), so these are
    the exact ids of the rollout."""
    starts = [i for i, m in enumerate(traj.messages) if m["role"] == "assistant"]
    return [
        Sample(policy.prompt_ids(traj.messages[:at]), turn.token_ids, turn.logprobs, advantage)
        for turn, at in zip(traj.turns, starts, strict=False)
        if turn.token_ids
    ]


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


def update(engine, model: nn.Module, reference: nn.Module | None, samples: list[Sample], cfg: RLConfig, pad: int):
    """`cfg.minibatches` optimizer steps over this step's samples (see objective.py for the loss)."""
    stats = Update()
    if not samples:
        return stats
    with torch.no_grad():
        # With one mini-batch the weights at the start of the step are the weights being updated, so
        # the proximal logprobs are the current ones, detached: no extra forward.
        proximal = completion_logprobs(model, samples, pad, cfg.temperature) if cfg.minibatches > 1 else None
        ref = (
            completion_logprobs(reference, samples, pad, cfg.temperature)
            if reference is not None
            else [None] * len(samples)
        )
    chunks = [list(range(len(samples)))[k :: cfg.minibatches] for k in range(cfg.minibatches)]
    for idx in (c for c in chunks if c):
        current = completion_logprobs(engine, [samples[i] for i in idx], pad, cfg.temperature)
        terms = [
            pg_loss(
                cur,
                cur.detach() if proximal is None else proximal[i],
                torch.tensor(samples[i].behaviour),
                samples[i].advantage,
                cfg.clip_low,
                cfg.clip_high,
                cfg.tis_cap,
                ref[i],
                cfg.kl_coef,
            )
            for cur, i in zip(current, idx, strict=True)
        ]
        tokens = sum(t.tokens for t in terms)
        # GRPO (DAPO's token-level form): the mean over the mini-batch's tokens. Dr.GRPO: a constant,
        # so a long answer's tokens weigh as much as a short one's and length carries no hidden bias.
        norm = tokens if cfg.normalization == "grpo" else len(idx) * cfg.max_new_tokens
        engine.backward(sum(t.loss for t in terms) / norm)
        stats.grad_norm = max(stats.grad_norm, optimizer_step(engine, model))
        stats.tokens += tokens
        stats.clipped += sum(t.clipped for t in terms)
        stats.tis_truncated += sum(t.tis_truncated for t in terms)
        stats.tis_weight_sum += sum(t.tis_weight_sum for t in terms)
        stats.kl_sum += sum(t.kl_sum for t in terms)
    return stats


def train_rl(
    model: nn.Module,
    tok,
    tasks: list[Task],
    cfg: RLConfig,
    reward: RewardConfig,
    out: Path,
    tag: str,
    seed: int,
    rollouts,  # LocalRollouts or fleet.RayRollouts (the sandboxed episodes): submit, ready, publish
    state_dir: Path | None = None,
    reference: nn.Module | None = None,
) -> dict:
    """Train `model` in place; metrics go to out/metrics.jsonl, hack incidents to out/incidents.jsonl.
    `rollouts` is where episodes come from: LocalRollouts (sync) or the Ray fleet; its creator closes it."""
    from harnessrl.train import distributed

    distributed.setup()
    engine = build_engine(model, trainer_config(cfg, model.config.max_position_embeddings))
    rng = random.Random(seed)
    start, extra = load_state(engine, state_dir) if state_dir else (0, {})
    metrics_path = out / "metrics.jsonl"
    if start:  # keep the metrics and incidents of the steps the saved state holds
        print(f"[{tag}] resumed at step {start}/{cfg.steps} from {state_dir}", flush=True)
        rng.setstate(_as_rng_state(extra["rng"]))
        for name in ("metrics.jsonl", "incidents.jsonl"):
            restore(state_dir / name, out / name, start)
    monitor = HackMonitor(cfg.monitors, out / "incidents.jsonl", f"stages.{tag}.monitors")
    renderer = HFPolicy(model, tok, cfg.temperature, cfg.max_new_tokens)  # prompt ids exactly as rollouts saw them
    rollouts.publish(start, model)
    # Sync keeps one step's groups in flight; async keeps enough that generation never waits for the
    # trainer, and no more than the staleness bound lets the trainer use.
    target = cfg.prompts_per_step * (1 if cfg.mode == "sync" else 1 + cfg.max_staleness)
    batches, in_flight = extra.get("batches", start), 0
    last: dict = read_metrics(metrics_path)[-1] if start else {}
    interrupts = rollouts.interrupts()
    with MetricsWriter(metrics_path) as log:
        for step in range(start, cfg.steps):
            t0 = time.perf_counter()
            groups: list[list[Rollout]] = []
            dropped = 0
            while len(groups) < cfg.prompts_per_step:
                while in_flight < target:
                    for task in rng.sample(tasks, min(cfg.prompts_per_step, len(tasks))):
                        rollouts.submit(task, seed * 10_007 + batches)
                        in_flight += 1
                    batches += 1
                for g in rollouts.ready(cfg.prompts_per_step - len(groups)):
                    in_flight -= 1
                    if step - min(r.version for r in g) > cfg.max_staleness:
                        dropped += 1  # too old to correct: the bound is a promise, not a hint
                    else:
                        groups.append(g)
            rollouts_now = [r for g in groups for r in g]
            trajs = [r.trajectory for r in rollouts_now]
            needed = [int(r.task.user is not None) for r in rollouts_now]
            comps = [reward_components(tr, reward, n) for tr, n in zip(trajs, needed, strict=True)]
            rewards = torch.tensor([total(c) for c in comps])
            adv = group_advantages(rewards, cfg.group_size, cfg.normalization)
            t_roll = time.perf_counter() - t0

            model.train()
            samples = [
                s
                for r, a in zip(rollouts_now, adv.tolist(), strict=True)
                if a != 0.0 or cfg.kl_coef > 0  # a zero advantage moves nothing but the KL term
                for s in turn_samples(r.trajectory, renderer, a)
            ]
            stats = update(engine, model, reference, samples, cfg, tok.pad_token_id)
            model.eval()
            rollouts.publish(step + 1, model)

            n = len(trajs)
            turns = sum(tr.counts.turns for tr in trajs)
            generated = sum(tr.counts.tokens for tr in trajs)
            hack, incidents = monitor.update(step + 1, trajs, comps, needed)
            now = rollouts.interrupts()
            interrupted, interrupts = now - interrupts, now
            dt = time.perf_counter() - t0
            last = {
                "step": step + 1,
                "policy_version": step + 1,
                "staleness": sum(step - r.version for r in rollouts_now) / n,
                "dropped_stale_groups": dropped,
                "interrupted_batches": interrupted,  # rollout batches that took new weights mid-turn
                "reward": float(rewards.mean()),
                "success": sum(bool(tr.outcome.success) for tr in trajs) / n,
                "malformed": sum(tr.counts.malformed_turns for tr in trajs) / max(1, turns),
                "turns": turns / n,
                **{f"reward/{k}": sum(c[k] for c in comps) / n for k in comps[0]},
                **hack,
                "grad_norm": stats.grad_norm,
                "clip_frac": stats.clipped / max(1, stats.tokens),
                "tis/weight": stats.tis_weight_sum / max(1, stats.tokens),
                "tis/truncated_frac": stats.tis_truncated / max(1, stats.tokens),
                "kl": stats.kl_sum / max(1, stats.tokens),
                "trained_tokens": stats.tokens,
                "wait_s": t_roll,
                "step_s": dt,
                "tokens_per_s": generated / dt,
                "episodes_per_s": n / dt,
            }
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
                save_state(engine, state_dir, step + 1, {"rng": rng.getstate(), "batches": batches})
    return last


def _as_rng_state(saved) -> tuple:
    """random.getstate() comes back from a checkpoint with its inner tuple as a list."""
    version, internal, gauss = saved
    return version, tuple(internal), gauss
