"""The supervised training loop shared by CPT and SFT, on the DeepSpeed engine.

One step = `grad_accum` micro-batches per rank, one optimizer step, one metrics row. Batches come
from a seeded, endless iterator, so a resumed run fast-forwards it and sees exactly the batches an
uninterrupted run would have seen: after a resume the loss equals the uninterrupted run's.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from harnessrl.config import TrainConfig
from harnessrl.metrics import MetricsWriter, restore, snapshot
from harnessrl.train.engine import build_engine, load_state, optimizer_step, save_state

Batch = tuple[torch.Tensor, torch.Tensor]  # input_ids [B, T], labels [B, T] (-100 = not trained)


def packed_batches(tokens: list[int], cfg: TrainConfig, seed: int, rank: int = 0, world: int = 1) -> Iterator[Batch]:
    """Endless batches of seq_len windows cut from one token stream (CPT packing); rank r of w
    takes every w-th batch of one shared shuffled order, so ranks never see the same window."""
    n = (len(tokens) - 1) // cfg.seq_len
    if n < cfg.micro_batch_size * world:
        raise ValueError(
            f"corpus has {len(tokens)} tokens: too few for {world} rank(s) of "
            f"{cfg.micro_batch_size} x {cfg.seq_len}-token sequences"
        )
    data = torch.tensor(tokens[: n * cfg.seq_len])
    g = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(n, generator=g).split(cfg.micro_batch_size)
        for idx in itertools.islice(order, rank, len(order) - len(order) % world, world):
            x = torch.stack([data[i * cfg.seq_len : (i + 1) * cfg.seq_len] for i in idx.tolist()])
            yield x, x.clone()  # HF shifts labels inside the model


def masked_batches(
    samples: list[tuple[list[int], list[bool]]], cfg: TrainConfig, pad_id: int, seed: int, rank: int = 0, world: int = 1
) -> Iterator[Batch]:
    """Endless batches of conversations, right-padded; only assistant tokens carry labels (SFT).

    `cfg.length_buckets` splits the conversations by token length, and each batch comes from one
    bucket, so a short conversation is not padded out to a long one's length; within a bucket,
    batches are drawn at random, and the buckets' batches are shuffled together, so every
    conversation is seen once an epoch. (Sorting by length within a shuffled window instead made
    batches of one kind of answer, the teacher's guesses say, and SFT stopped learning.)"""
    if len(samples) < cfg.micro_batch_size * world:
        raise ValueError(f"{len(samples)} conversations: too few for {world} rank(s) of {cfg.micro_batch_size}")
    buckets: list[list[int]] = [[] for _ in range(len(cfg.length_buckets) + 1)]
    for i, (ids, _) in enumerate(samples):
        buckets[bisect.bisect_left(cfg.length_buckets, len(ids))].append(i)
    g = torch.Generator().manual_seed(seed)
    while True:
        batches = [
            [bucket[j] for j in chunk.tolist()]
            for bucket in buckets
            if bucket
            for chunk in torch.randperm(len(bucket), generator=g).split(cfg.micro_batch_size)
        ]
        shuffled = [batches[k] for k in torch.randperm(len(batches), generator=g).tolist()]
        for idx in itertools.islice(shuffled, rank, len(shuffled) - len(shuffled) % world, world):
            rows = [samples[i] for i in idx]
            width = min(cfg.seq_len, max(len(ids) for ids, _ in rows))
            x = torch.full((len(rows), width), pad_id)
            y = torch.full((len(rows), width), -100)
            for r, (ids, mask) in enumerate(rows):
                ids, mask = ids[:width], mask[:width]
                x[r, : len(ids)] = torch.tensor(ids)
                y[r, : len(ids)] = torch.where(torch.tensor(mask), torch.tensor(ids), -100)
            yield x, y


def lm_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The causal-LM loss (mean cross-entropy of each labelled token given the ones before), with the
    output projection run only where there are labels: in SFT that is the assistant's ~20% of the
    tokens, and the vocabulary-wide logits of the rest were a sixth of a step. `model` is an HF causal
    LM or a DeepSpeed engine around one (whose module hooks run either way)."""
    hf = getattr(model, "module", model)
    hidden = hf.get_decoder()(input_ids=x).last_hidden_state[:, :-1]
    target = y[:, 1:]
    keep = target != -100
    logits = hf.get_output_embeddings()(hidden[keep]).float()
    return torch.nn.functional.cross_entropy(logits, target[keep])


@dataclass(frozen=True)
class Run:
    """Where a training run writes, and who it is in the process group."""

    metrics: Path
    tag: str
    rank: int = 0
    world: int = 1
    state_dir: Path | None = None  # DeepSpeed states for resume; None: no intermediate saves
    checkpoint_every: int = 0


def train(model: torch.nn.Module, batches: Iterator[Batch], cfg: TrainConfig, run: Run):
    """cfg.steps optimizer steps on the DeepSpeed engine. Returns (engine, last step's metrics)."""
    engine = build_engine(model, cfg)
    start = load_state(engine, run.state_dir)[0] if run.state_dir else 0
    for _ in range(start * cfg.grad_accum):  # replay the data order up to the resumed step
        next(batches)
    if start and run.rank == 0:  # keep the metrics of the steps the resumed state already holds
        print(f"[{run.tag}] resumed at step {start}/{cfg.steps} from {run.state_dir}", flush=True)
        restore(run.state_dir / "metrics.jsonl", run.metrics, start)
    engine.train()
    last: dict = {}
    log = MetricsWriter(run.metrics) if run.rank == 0 else None
    for step in range(start, cfg.steps):
        t0 = time.perf_counter()
        lr = engine.get_lr()[0]
        loss_sum = torch.zeros(2)  # summed loss, trained tokens
        grad_norm = None
        for micro in range(cfg.grad_accum):
            x, y = next(batches)
            loss = lm_loss(engine, x, y)
            engine.backward(loss)
            grad_norm = optimizer_step(engine, model, boundary=micro == cfg.grad_accum - 1)
            loss_sum += torch.tensor([loss.item(), float((y[:, 1:] != -100).sum())])
        if run.world > 1:
            torch.distributed.all_reduce(loss_sum)
        dt = time.perf_counter() - t0
        last = {
            "step": step + 1,
            "loss": float(loss_sum[0]) / (cfg.grad_accum * run.world),
            "lr": lr,
            "grad_norm": grad_norm,
            "tokens_per_s": float(loss_sum[1]) / dt,
        }
        if log:
            log.write(last)
            if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
                print(
                    f"[{run.tag}] step {step + 1}/{cfg.steps} loss {last['loss']:.4f} lr {last['lr']:.2e} "
                    f"gnorm {last['grad_norm']:.2f} {last['tokens_per_s']:,.0f} tok/s",
                    flush=True,
                )
        if run.state_dir and run.checkpoint_every and (step + 1) % run.checkpoint_every == 0 and step + 1 < cfg.steps:
            if log:
                snapshot(run.metrics, run.state_dir / "metrics.jsonl")  # before the state: see `snapshot`
            save_state(engine, run.state_dir, step + 1)
    if log:
        log.close()
    engine.eval()
    return engine, last
