"""One GRPO step (generate, score, update) in harnessrl against TRL's GRPOTrainer, side by side.

Same tiny model (built from the smoke recipe's config), same single-turn prompts, group size, batch,
max new tokens, learning rate and reward function; both on this CPU, both in fp32. harnessrl's step is
the RL stage's own code: the `hf` engine's batched generate, group advantages, and LocalTrainer's
`update` on the DeepSpeed engine. Target: at most half of TRL's time per step.

    pip install -e '.[bench]' && python bench/rl_vs_trl.py [--steps 6] [--prompts 8] [--group 8]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from harnessrl.config import compose
from harnessrl.data.build import build, read_jsonl
from harnessrl.engines.hf import generate
from harnessrl.model.checkpoint import load
from harnessrl.model.tokenizer import render_ids
from harnessrl.rl.loop import group_advantages
from harnessrl.rl.trainer import LocalTrainer, Sample
from harnessrl.stage import run_stage
from pipelines.routing import stage_slice


def reward(text: str) -> float:
    """Single-turn and cheap on purpose, so the step's cost is generation and the update."""
    return float("<tool_call>" in text) + 0.1 * float(len(text) < 80)


def base_checkpoint(root: Path) -> tuple[Path, list[list[dict]]]:
    from components.base import work

    cfg = compose(["recipe=tiny_smoke"])
    data = build(cfg.data, root / "data")
    run_stage("base", work, json.dumps(stage_slice(cfg, "base")), str(data), "md5", None, str(root / "base"))
    prompts = [row["messages"] for row in read_jsonl(data / "prompts.jsonl")]
    return root / "base", prompts


def harnessrl_steps(ckpt: Path, prompts: list[list[dict]], args) -> list[float]:
    model, tok = load(ckpt)
    cfg = compose(["recipe=tiny_smoke", f"stages.rl.lr={args.lr}", f"stages.rl.max_new_tokens={args.max_tokens}",
                   f"stages.rl.group_size={args.group}", f"stages.rl.prompts_per_step={args.prompts}",
                   f"stages.rl.steps={args.steps}"]).stages.rl  # fmt: skip
    trainer = LocalTrainer(model, None, cfg, tok.pad_token_id)
    times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        batch = prompts[(step * args.prompts) % len(prompts) :][: args.prompts]
        ids = [render_ids(tok, m, add_generation_prompt=True)[0] for m in batch for _ in range(args.group)]
        model.eval()
        outs = generate(model, tok, ids, args.max_tokens, 1.0, seed=step)
        rewards = torch.tensor([reward(tok.decode(o.token_ids)) for o in outs])
        adv = group_advantages(rewards, args.group)
        samples = [Sample(p, o.token_ids, o.logprobs, a) for p, o, a in zip(ids, outs, adv.tolist(), strict=True)]
        trainer.update([s for s in samples if s.advantage != 0])
        times.append(time.perf_counter() - t0)
    return times


def trl_steps(ckpt: Path, prompts: list[list[dict]], args, out: Path) -> list[float]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tok = load(ckpt)
    rows = [{"prompt": prompts[i % len(prompts)]} for i in range(args.prompts * args.steps)]
    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            stamps.append(time.perf_counter())

        def on_train_end(self, *a, **k):
            stamps.append(time.perf_counter())

    config = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=args.prompts * args.group,  # completions per step, as harnessrl's
        num_generations=args.group,
        max_completion_length=args.max_tokens,
        max_steps=args.steps,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        temperature=1.0,
        top_k=0,
        beta=0.0,
        num_iterations=1,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        dataloader_num_workers=0,
        shuffle_dataset=False,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [
            reward(c[0]["content"] if isinstance(c, list) else c) for c in completions
        ],
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        callbacks=[Clock()],
    )
    trainer.train()
    return [b - a for a, b in itertools.pairwise(stamps)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-4)
    args = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, prompts = base_checkpoint(Path(tmp))
        ours = harnessrl_steps(ckpt, prompts, args)[1:]  # the first step warms up both
        theirs = trl_steps(ckpt, prompts, args, Path(tmp) / "trl")[1:]
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"\none GRPO step: {args.prompts} prompts x {args.group} completions, <= {args.max_tokens} new tokens, "
          f"median of {len(ours)} steps after a warm-up")  # fmt: skip
    print(f"{'':<12}{'s/step':>10}")
    print(f"{'harnessrl':<12}{a:>10.3f}")
    print(f"{'TRL':<12}{b:>10.3f}")
    print(f"harnessrl / TRL = {a / b:.2f}x (target <= 0.50)")


if __name__ == "__main__":
    main()
