"""The supervised training loop shared by CPT and SFT.

One step = `grad_accum` micro-batches, a clipped AdamW update and one metrics row. The DeepSpeed
engine (ZeRO, bf16, multi-process) replaces the plain optimizer in the training issue; the batches,
schedule and metrics stay as they are.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from harnessrl.config import TrainConfig
from harnessrl.metrics import MetricsWriter

Batch = tuple[torch.Tensor, torch.Tensor]  # input_ids [B, T], labels [B, T] (-100 = not trained)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup, then cosine or linear decay to lr * min_lr_ratio, or constant."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    shape = 0.5 * (1 + math.cos(math.pi * progress)) if cfg.schedule == "cosine" else 1 - progress
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * shape)


def packed_batches(tokens: list[int], cfg: TrainConfig, seed: int) -> Iterator[Batch]:
    """Endless batches of seq_len windows cut from one long token stream (CPT packing)."""
    n = (len(tokens) - 1) // cfg.seq_len
    if n < 1:
        raise ValueError(f"corpus has {len(tokens)} tokens, fewer than one sequence of {cfg.seq_len}")
    data = torch.tensor(tokens[: n * cfg.seq_len + 1])
    g = torch.Generator().manual_seed(seed)
    while True:
        for idx in torch.randperm(n, generator=g).split(cfg.micro_batch_size):
            x = torch.stack([data[i * cfg.seq_len : (i + 1) * cfg.seq_len] for i in idx.tolist()])
            yield x, x.clone()  # HF shifts labels inside the model


def masked_batches(
    samples: list[tuple[list[int], list[bool]]], cfg: TrainConfig, pad_id: int, seed: int
) -> Iterator[Batch]:
    """Endless batches of conversations, right-padded; only assistant tokens carry labels (SFT)."""
    g = torch.Generator().manual_seed(seed)
    while True:
        for idx in torch.randperm(len(samples), generator=g).split(cfg.micro_batch_size):
            rows = [samples[i] for i in idx.tolist()]
            width = min(cfg.seq_len, max(len(ids) for ids, _ in rows))
            x = torch.full((len(rows), width), pad_id)
            y = torch.full((len(rows), width), -100)
            for r, (ids, mask) in enumerate(rows):
                ids, mask = ids[:width], mask[:width]
                x[r, : len(ids)] = torch.tensor(ids)
                y[r, : len(ids)] = torch.where(torch.tensor(mask), torch.tensor(ids), -100)
            yield x, y


def train(model: nn.Module, batches: Iterator[Batch], cfg: TrainConfig, metrics_path: Path, tag: str) -> dict:
    """Run cfg.steps optimizer steps; returns the last step's metrics."""
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    model.train()
    last: dict = {}
    with MetricsWriter(metrics_path) as log:
        for step in range(cfg.steps):
            t0 = time.perf_counter()
            lr = lr_at(step, cfg)
            for group in opt.param_groups:
                group["lr"] = lr
            loss_sum, tokens = 0.0, 0
            for _ in range(cfg.grad_accum):
                x, y = next(batches)
                loss = model(input_ids=x, labels=y).loss / cfg.grad_accum
                loss.backward()
                loss_sum += loss.item()
                tokens += int((y != -100).sum())
            grad_norm = float(nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip))
            opt.step()
            opt.zero_grad(set_to_none=True)
            dt = time.perf_counter() - t0
            last = {"step": step + 1, "loss": loss_sum, "lr": lr, "grad_norm": grad_norm, "tokens_per_s": tokens / dt}
            log.write(last)
            if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
                print(
                    f"[{tag}] step {step + 1}/{cfg.steps} loss {loss_sum:.4f} lr {lr:.2e} "
                    f"gnorm {grad_norm:.2f} {tokens / dt:,.0f} tok/s",
                    flush=True,
                )
    model.eval()
    return last
