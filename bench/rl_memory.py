"""Peak memory and time of one RL update, with and without activation checkpointing, side by side.

The update trains every sampled token of a step's episodes in one loss, so without checkpointing the
backward pass keeps each layer's activations for all of them; `stages.rl.activation_checkpointing`
recomputes them layer by layer. Each variant runs in a process of its own (peak RSS is per process),
on the same synthetic step: EPISODES packed sequences of PROMPT context tokens and SAMPLED trained
tokens each, the shape of recipe=smol's multi-turn episodes.

    python bench/rl_memory.py runs/models/smollm2-135m [--episodes 6] [--prompt 1200] [--sampled 120]

A variant the kernel kills for memory is reported as such (16 episodes of this shape, without
checkpointing, pass 24 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one(model_dir: str, episodes: int, prompt: int, sampled: int, checkpointing: bool) -> dict:
    import torch

    from harnessrl.config import compose
    from harnessrl.model.checkpoint import load
    from harnessrl.rl.trainer import LocalTrainer, Sample

    torch.manual_seed(0)
    torch.set_num_threads(max(1, int(os.environ.get("HARNESSRL_THREADS", os.cpu_count() or 1))))
    model, tok = load(Path(model_dir))
    vocab = model.config.vocab_size
    samples = [Sample(torch.randint(0, vocab, (prompt,)).tolist(), torch.randint(0, vocab, (sampled,)).tolist(),
                      [-1.0] * sampled, 1.0 if i % 2 else -1.0) for i in range(episodes)]  # fmt: skip
    cfg = compose(["recipe=smol", f"stages.rl.activation_checkpointing={str(checkpointing).lower()}"]).stages.rl
    trainer = LocalTrainer(model, None, cfg, tok.pad_token_id)
    t0 = time.perf_counter()
    trainer.update(samples)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a Hugging Face checkpoint folder, e.g. runs/models/smollm2-135m")
    p.add_argument("--episodes", type=int, default=6)
    p.add_argument("--prompt", type=int, default=1200, help="context tokens per packed sequence")
    p.add_argument("--sampled", type=int, default=120, help="trained tokens per packed sequence")
    p.add_argument("--one", choices=["on", "off"], help=argparse.SUPPRESS)  # a child process's variant
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args.model, args.episodes, args.prompt, args.sampled, args.one == "on")))
        return
    shape = ["--episodes", str(args.episodes), "--prompt", str(args.prompt), "--sampled", str(args.sampled)]
    rows: dict[str, dict | None] = {}
    for variant in ("off", "on"):
        run = subprocess.run([sys.executable, __file__, args.model, *shape, "--one", variant],
                             capture_output=True, text=True, cwd=HERE.parent)  # fmt: skip
        if run.returncode == -9:  # the kernel's OOM killer: the variant does not fit this machine
            rows[variant] = None
            continue
        if run.returncode != 0:
            sys.exit(f"variant {variant} failed ({run.returncode}):\n{run.stderr[-2000:]}")
        rows[variant] = json.loads(run.stdout.strip().splitlines()[-1])
    tokens = args.episodes * (args.prompt + args.sampled)
    print(f"one RL update: {args.episodes} sequences, {tokens:,} tokens, {args.episodes * args.sampled:,} trained")
    print(f"{'activation checkpointing':<26} {'peak RSS GiB':>12} {'seconds':>9}")
    for variant, r in rows.items():
        cells = f"{r['peak_gib']:>12.2f} {r['seconds']:>9.1f}" if r else f"{'killed: out of memory':>22}"
        print(f"{variant:<26} {cells}")
    off, on = rows["off"], rows["on"]
    if off and on:
        print(f"on / off: memory {on['peak_gib'] / off['peak_gib']:.2f}x, time {on['seconds'] / off['seconds']:.2f}x")


if __name__ == "__main__":
    main()
