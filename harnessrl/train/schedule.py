"""Learning-rate schedule: linear warmup, then cosine or linear decay to lr * min_lr_ratio, or constant."""

from __future__ import annotations

import math

from harnessrl.config import TrainConfig


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
    shape = 0.5 * (1 + math.cos(math.pi * progress)) if cfg.schedule == "cosine" else 1 - progress
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * shape)
