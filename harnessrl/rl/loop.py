"""A synchronous group-relative policy-gradient loop over lookup tasks' first turns.

This is the RL stages' smallest honest work until the async RL issue lands: real rollouts from the
policy, rewards from executing its call, group-relative advantages and a token-level policy-gradient
update on exactly the token ids the policy generated.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch
from torch import nn

from harnessrl.config import RewardConfig, RLConfig
from harnessrl.engines.hf import generate
from harnessrl.metrics import MetricsWriter
from harnessrl.model.tokenizer import render_ids
from harnessrl.rewards.lookup_call import score


def group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """(r - mean of its group) / (std of its group + eps), for rewards laid out group by group."""
    g = rewards.view(-1, group_size)
    return ((g - g.mean(dim=1, keepdim=True)) / (g.std(dim=1, keepdim=True) + 1e-4)).view(-1)


def sequence_logprobs(model: nn.Module, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """Per-token log-probabilities of `completion` given `prompt` under `model`."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(completion)[:, None]).squeeze(1)


def train_rl(
    model: nn.Module,
    tok,
    tasks: list[dict],
    cfg: RLConfig,
    reward: RewardConfig,
    repos: Path,
    metrics_path: Path,
    tag: str,
    seed: int,
) -> dict:
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    last: dict = {}
    with MetricsWriter(metrics_path) as log:
        for step in range(cfg.steps):
            t0 = time.perf_counter()
            batch = rng.sample(tasks, min(cfg.prompts_per_step, len(tasks)))
            prompts = [render_ids(tok, t["messages"], add_generation_prompt=True)[0] for t in batch]
            flat = [p for p in prompts for _ in range(cfg.group_size)]
            model.eval()
            completions = [
                c.token_ids
                for c in generate(model, tok, flat, cfg.max_new_tokens, cfg.temperature, seed * 100_003 + step)
            ]
            scores = [
                score(tok.decode(c), t, repos)
                for c, t in zip(completions, [t for t in batch for _ in range(cfg.group_size)], strict=False)
            ]
            rewards = torch.tensor([reward.outcome * s["success"] + reward.malformed * s["malformed"] for s in scores])
            adv = group_advantages(rewards, cfg.group_size)

            model.train()
            n_tokens = sum(len(c) for c in completions)
            for p, c, a in zip(flat, completions, adv.tolist(), strict=False):
                if c and a != 0.0:
                    (-(a * sequence_logprobs(model, p, c)).sum() / n_tokens).backward()
            grad_norm = float(nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip))
            opt.step()
            opt.zero_grad(set_to_none=True)

            dt = time.perf_counter() - t0
            last = {
                "step": step + 1,
                "reward": float(rewards.mean()),
                "success": sum(s["success"] for s in scores) / len(scores),
                "malformed": sum(s["malformed"] for s in scores) / len(scores),
                "grad_norm": grad_norm,
                "tokens_per_s": n_tokens / dt,
                "policy_version": step + 1,
            }
            log.write(last)
            print(
                f"[{tag}] step {step + 1}/{cfg.steps} reward {last['reward']:.3f} success {last['success']:.2f} "
                f"malformed {last['malformed']:.2f} {last['tokens_per_s']:,.0f} tok/s",
                flush=True,
            )
    model.eval()
    return last
