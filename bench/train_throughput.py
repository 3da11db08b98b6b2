"""Tokens/s of a CPT step through harnessrl (DeepSpeed, ZeRO-0 and ZeRO-1) against a plain PyTorch
AdamW loop, on the same tiny model, batches and number of steps, measured side by side in one run.

    python bench/train_throughput.py [--steps 40] [--hidden 128] [--layers 2]

Target (issue 4): overhead <= 10% at ZeRO-0/1.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from pathlib import Path

import torch

from harnessrl.config import ArchConfig, TrainConfig
from harnessrl.model.checkpoint import build_from_arch
from harnessrl.train import distributed
from harnessrl.train.loop import Run, packed_batches, train


def plain_loop(model: torch.nn.Module, batches, cfg: TrainConfig) -> float:
    """The reference: AdamW, clipping and the same schedule, no DeepSpeed. Returns seconds."""
    from harnessrl.train.schedule import lr_at

    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg)
        x, y = next(batches)
        model(input_ids=x, labels=y).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="alternating repeats; the median is reported")
    args = ap.parse_args()
    arch = ArchConfig(
        vocab_size=1024,
        hidden_size=args.hidden,
        num_layers=args.layers,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=args.hidden * 2,
        max_position_embeddings=1024,
    )
    tokens = torch.randint(0, 1024, (400_000,), generator=torch.Generator().manual_seed(0)).tolist()
    distributed.setup()
    tmp = Path(tempfile.mkdtemp(prefix="bench-train-"))
    times: dict[str, list[float]] = {"plain AdamW": [], "harnessrl ZeRO-0": [], "harnessrl ZeRO-1": []}
    for rep in range(args.repeats):
        for name in times:
            zero = 0 if name.endswith("0") else 1
            cfg = TrainConfig(
                steps=args.steps,
                micro_batch_size=8,
                seq_len=256,
                lr=1e-3,
                warmup_steps=5,
                zero_stage=zero,
                log_every=10**9,
            )
            model = build_from_arch(arch, pad_token_id=1, seed=0)
            batches = packed_batches(tokens, cfg, seed=0)
            warm = list(itertools.islice(packed_batches(tokens, cfg, seed=1), 3))
            if name == "plain AdamW":
                plain_loop(model, iter(warm), cfg.model_copy(update={"steps": 3}))  # warm the kernels
                times[name].append(plain_loop(model, batches, cfg))
            else:
                train(model, iter(warm), cfg.model_copy(update={"steps": 3}), Run(tmp / f"w{rep}{zero}.jsonl", "warm"))
                t0 = time.perf_counter()
                train(model, batches, cfg, Run(tmp / f"m{rep}{zero}.jsonl", "bench"))
                times[name].append(time.perf_counter() - t0)
    tok = args.steps * 8 * 255
    base = statistics.median(times["plain AdamW"])
    print(
        f"\n== CPT step throughput: hidden {args.hidden}, {args.layers} layers, batch 8x256, {args.steps} steps, "
        f"median of {args.repeats} =="
    )
    print(f"{'loop':<20}{'tokens/s':>12}{'time/step ms':>14}{'vs plain':>10}")
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"{name:<20}{tok / t:>12,.0f}{1000 * t / args.steps:>14.1f}{t / base:>9.2f}x")
    print("target: harnessrl ZeRO-0/1 within 1.10x of plain")


if __name__ == "__main__":
    main()
