"""Synchronous group-relative policy gradients over whole harness episodes.

Each step: pick tasks, run `group_size` sandboxed episodes of each with the current policy, score
every trajectory with the shaped reward, turn rewards into group-relative advantages, and take one
clipped policy-gradient step on exactly the token ids the policy generated, against the behaviour
logprobs it sampled them with. The async, Ray-based loop of the RL issue reuses these pieces.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch
from torch import nn

from harnessrl.config import RewardConfig, RLConfig
from harnessrl.engines.batched import LockstepBatcher
from harnessrl.engines.policy import HFPolicy
from harnessrl.harness.episode import Budgets, Trajectory
from harnessrl.metrics import MetricsWriter
from harnessrl.rewards.shaped import reward_components, total
from harnessrl.tasks import Task, run_task
from harnessrl.tasks.run import BASE_UID


def group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """(r - mean of its group) / (std of its group + eps), for rewards laid out group by group."""
    g = rewards.view(-1, group_size)
    return ((g - g.mean(dim=1, keepdim=True)) / (g.std(dim=1, keepdim=True) + 1e-4)).view(-1)


def sequence_logprobs(model: nn.Module, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """Per-token log-probabilities of `completion` given `prompt` under `model`."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(completion)[:, None]).squeeze(1)


def turn_samples(traj: Trajectory, policy: HFPolicy) -> list[tuple[list[int], list[int], list[float]]]:
    """(prompt ids as the policy saw them, generated ids, behaviour logprobs) for each sampled turn."""
    starts = [i for i, m in enumerate(traj.messages) if m["role"] == "assistant"]
    out = []
    for turn, at in zip(traj.turns, starts, strict=False):
        if turn.token_ids:
            out.append((policy.prompt_ids(traj.messages[:at]), turn.token_ids, turn.logprobs))
    return out


def clipped_pg_loss(
    new: torch.Tensor, old: torch.Tensor, adv: float, clip_low: float, clip_high: float
) -> torch.Tensor:
    """Token-level PPO-clip objective (DAPO clip-higher when clip_high > clip_low), summed over tokens."""
    ratio = torch.exp(new - old)
    return -torch.min(ratio * adv, ratio.clamp(1 - clip_low, 1 + clip_high) * adv).sum()


def check_supported(cfg: RLConfig, engine_kind: str, stage: str) -> None:
    """Refuse settings this loop does not implement yet, naming the field, rather than ignore them.
    (Silently ignored staleness and IS settings are a known complaint about other RL frameworks.)"""
    unsupported = {
        f"stages.{stage}.mode": cfg.mode != "sync" and "only 'sync' is implemented; async RL on Ray is pending",
        f"stages.{stage}.kl_coef": cfg.kl_coef > 0 and "a KL penalty to a reference model is not implemented yet",
        "engine.kind": engine_kind != "hf" and f"only the 'hf' engine drives RL so far (got {engine_kind!r})",
    }
    for field, problem in unsupported.items():
        if problem:
            raise ValueError(f"{field}: {problem}")


def train_rl(
    model: nn.Module,
    tok,
    tasks: list[Task],
    suite_dir: Path,
    cfg: RLConfig,
    reward: RewardConfig,
    metrics_path: Path,
    tag: str,
    seed: int,
    budgets: Budgets,
) -> dict:
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    last: dict = {}
    with MetricsWriter(metrics_path) as log:
        for step in range(cfg.steps):
            t0 = time.perf_counter()
            batch = rng.sample(tasks, min(cfg.prompts_per_step, len(tasks)))
            group = [t for t in batch for _ in range(cfg.group_size)]
            model.eval()
            batcher = LockstepBatcher(model, tok, cfg.temperature, cfg.max_new_tokens, seed=seed * 10_007 + step)
            trajs = batcher.run(
                group, lambda task, policy, slot: run_task(task, suite_dir, policy, budgets, uid=BASE_UID + slot)
            )
            policy = batcher.single
            comps = [
                reward_components(tr, reward, questions_needed=int(t.user is not None))
                for tr, t in zip(trajs, group, strict=True)
            ]
            rewards = torch.tensor([total(c) for c in comps])
            adv = group_advantages(rewards, cfg.group_size)
            t_roll = time.perf_counter() - t0

            model.train()
            samples = [(s, a) for tr, a in zip(trajs, adv.tolist(), strict=True) for s in turn_samples(tr, policy)]
            n_tokens = max(1, sum(len(ids) for (_, ids, _), _ in samples))
            for (prompt, ids, old), a in samples:
                if a != 0.0:
                    new = sequence_logprobs(model, prompt, ids)
                    (clipped_pg_loss(new, torch.tensor(old), a, cfg.clip_low, cfg.clip_high) / n_tokens).backward()
            grad_norm = float(nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip))
            opt.step()
            opt.zero_grad(set_to_none=True)

            n = len(trajs)
            turns = sum(tr.counts.turns for tr in trajs)
            last = {
                "step": step + 1,
                "policy_version": step + 1,
                "reward": float(rewards.mean()),
                "success": sum(bool(tr.outcome.success) for tr in trajs) / n,
                "malformed": sum(tr.counts.malformed_turns for tr in trajs) / max(1, turns),
                "turns": turns / n,
                **{f"reward/{k}": sum(c[k] for c in comps) / n for k in comps[0]},
                "grad_norm": grad_norm,
                "rollout_s": t_roll,
                "tokens_per_s": n_tokens / (time.perf_counter() - t0),
            }
            log.write(last)
            print(
                f"[{tag}] step {step + 1}/{cfg.steps} reward {last['reward']:.3f} success {last['success']:.2f} "
                f"malformed {last['malformed']:.2f} turns {last['turns']:.1f} {last['tokens_per_s']:,.0f} tok/s",
                flush=True,
            )
    model.eval()
    return last
