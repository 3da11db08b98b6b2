"""Which half of a lookup does a checkpoint get wrong: the call, or the answer read from its output?

A lookup episode takes two copies: the question's name into the grep pattern, then the value (or the
path) from the tool's output into the answer. The eval scores both together, and a policy that
guesses without looking scores neither, so it cannot say which skill a checkpoint lacks. This probe
teacher-forces the expert's looking conversation on held-out lookup tasks and greedily decodes each
of the model's two turns separately:

    call     the first turn, given [system, question]: equal to the expert's grep call
    forced   the same, with the call forced up to its pattern's "^": does it copy the name?
    answer   the last turn, given the expert's call and the real tool output: equal to the answer
    guessed  the first turn is an answer ("0") rather than a call

per kind of question (value, function, class), so a seed whose SFT never learnt to copy shows it at once.

    python bench/copy_probe.py CHECKPOINT [CHECKPOINT ...] [--data data] [--tasks 128] [--like HF_CHECKPOINT]

A CHECKPOINT may be a stepN folder of a run's SFT state dir (`--like` gives its architecture), to
see when in training a skill appears.

With `--suite long_horizon` it does the same for the long-horizon suite's segments, built exactly as
the SFT data is (the summarizing expert, harnessrl/data/build.py), and decodes every expert turn of
every segment from its own prompt:

    call                the first search of an episode: copy the question's first name
    next call           a search after a search: the name after the one just searched
    call after summary  the first search of a later segment: the first name the summary lacks
    summary             the summary turn, whole; `facts` gives the share of its values it keeps
    answer              the final answer, whole; `values` gives the share right at each position

    python bench/copy_probe.py CHECKPOINT --suite long_horizon [--tasks 64]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

import torch

from harnessrl.config import LongHorizonDataConfig
from harnessrl.data.build import expert_segments
from harnessrl.harness.context import SUMMARIZE_REQUEST
from harnessrl.model.checkpoint import load
from harnessrl.model.prompts import PromptRenderer
from harnessrl.report.heldout import load_heldout
from harnessrl.tasks.expert import expert_trajectories


def greedy(model, renderer: PromptRenderer, messages: list[dict], prefix: str = "", max_tokens: int = 64) -> str:
    """The model's next turn, greedily; `prefix` is forced as the turn's start and is part of the text."""
    ids = renderer.prompt_ids(messages) + renderer.tok.encode(prefix, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=max_tokens, do_sample=False,
                             eos_token_id=sorted(renderer.stop), pad_token_id=renderer.tok.pad_token_id)  # fmt: skip
    return prefix + renderer.turn(ids, out[0, len(ids) :].tolist(), [], max_tokens).text


def load_any(checkpoint: Path, like: Path | None):
    """An HF checkpoint, or a DeepSpeed state of a training run (a stepN folder of SFT's state dir),
    whose weights go into the architecture and tokenizer of the HF checkpoint `like`."""
    states = checkpoint / "mp_rank_00_model_states.pt"
    if not states.is_file():
        return load(checkpoint)
    if like is None:
        raise SystemExit(f"{checkpoint}: a DeepSpeed state; pass --like HF_CHECKPOINT for its architecture")
    model, tok = load(like)
    model.load_state_dict(torch.load(states, map_location="cpu", weights_only=False)["module"])
    return model, tok


def probe(
    checkpoint: Path, like: Path | None, conversations: list[tuple[str, list[dict]]], show: int = 0
) -> dict[str, dict[str, float]]:
    model, tok = load_any(checkpoint, like)
    model.eval()
    renderer = PromptRenderer(tok, model.config.max_position_embeddings)
    hits: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for kind, msgs in conversations:
        call, answer = msgs[2]["content"].strip(), msgs[-1]["content"].strip()
        first = greedy(model, renderer, msgs[:2])
        # The call forced up to its pattern's "^" (a whole pre-token, so the ids are training's):
        # does the model copy the name when it does look?
        forced = greedy(model, renderer, msgs[:2], prefix=call[: call.index("^") + 1])
        last = greedy(model, renderer, msgs[:-1])
        for k in (kind, "all"):
            hits[k]["call"].append(first.strip() == call)
            hits[k]["forced"].append(forced.strip() == call)
            hits[k]["guessed"].append("<tool_call>" not in first)
            hits[k]["answer"].append(last.strip() == answer)
        if show and (forced.strip() != call or last.strip() != answer):
            show -= 1
            print(
                f"  {kind}: {msgs[1]['content']!r}\n    call   {forced.strip()!r}\n    answer {last.strip()!r} (want {answer!r})"
            )
    return {k: {m: sum(v) / len(v) for m, v in ms.items()} | {"n": len(ms["call"])} for k, ms in hits.items()}


def turn_kind(segment: list[dict], i: int, seen_call: bool) -> str:
    """What skill the expert's turn `segment[i]` takes (see the module docstring)."""
    if segment[i - 1]["content"] == SUMMARIZE_REQUEST:
        return "summary"
    if "<tool_call>" not in segment[i]["content"]:
        return "answer"
    if seen_call:
        return "next call"
    # A later segment opens [system, task, summary + task state]; the first opens with a turn.
    return "call after summary" if segment[2]["role"] == "user" else "call"


def probe_long_horizon(checkpoint: Path, like: Path | None, segments: list[list[dict]]) -> dict[str, dict]:
    model, tok = load_any(checkpoint, like)
    model.eval()
    renderer = PromptRenderer(tok, model.config.max_position_embeddings)
    hits: dict[str, list[bool]] = defaultdict(list)
    values: dict[int, list[bool]] = defaultdict(list)
    facts: list[bool] = []
    for seg in segments:
        seen_call = False
        for i, m in enumerate(seg):
            if m["role"] != "assistant":
                continue
            kind, want = turn_kind(seg, i, seen_call), m["content"].strip()
            seen_call = seen_call or "call" in kind
            got = greedy(model, renderer, seg[:i], max_tokens=128).strip()
            hits[kind].append(got == want)
            if kind == "summary":  # each value the expert kept (terse: "201 738"; verbose: `NAME = 201` lines)
                kept = re.findall(r"= (\d+)", want) or want.split()
                facts += [v in got.split() or f"= {v}" in got for v in kept]
            if kind == "answer":  # the long-horizon answer is values separated by spaces
                got_values = got.split()
                for k, v in enumerate(want.split()):
                    values[k].append(k < len(got_values) and got_values[k] == v)
    out: dict[str, dict] = {k: {"n": len(v), "exact": sum(v) / len(v)} for k, v in hits.items()}
    if facts:
        out["summary"]["facts"] = round(sum(facts) / len(facts), 2)
    if values:
        out["answer"]["values"] = [round(sum(v) / len(v), 2) for _, v in sorted(values.items())]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoints", nargs="+", type=Path)
    ap.add_argument("--data", type=Path, default=Path("data"))
    ap.add_argument("--suite", choices=["lookup", "long_horizon"], default="lookup")
    ap.add_argument("--tasks", type=int, default=128, help="held-out tasks to probe")
    ap.add_argument("--show", type=int, default=0, help="print this many wrong turns per checkpoint")
    ap.add_argument("--like", type=Path, help="an HF checkpoint whose architecture DeepSpeed states load into")
    args = ap.parse_args()
    if args.suite == "long_horizon":
        tasks = load_heldout(args.data, {"long_horizon": 1.0}, args.tasks)
        # The data folder's own long-horizon config (suite.json), so the segments are its SFT data's.
        built = json.loads((args.data / "suite.json").read_text())["data"]["long_horizon"]
        segments = expert_segments(tasks, args.data, LongHorizonDataConfig.model_validate(built))
        print(f"{len(tasks)} tasks, {len(segments)} segments")
        for ckpt in args.checkpoints:
            for kind, m in probe_long_horizon(ckpt, args.like, segments).items():
                extra = f"  values by position {m['values']}" if "values" in m else ""
                extra += f"  facts kept {m['facts']}" if "facts" in m else ""
                print(f"{str(ckpt)[-48:]:<48} {kind:<19} {m['n']:>4} {m['exact']:>6.3f}{extra}", flush=True)
        return
    tasks = load_heldout(args.data, {"lookup": 1.0}, args.tasks)
    trajectories = expert_trajectories(tasks, args.data, workers=2)
    conversations = [(t.solution.kind, tr.messages) for t, tr in zip(tasks, trajectories, strict=True)]
    print(f"{'checkpoint':<48} {'kind':<9} {'n':>4} {'call':>6} {'forced':>7} {'answer':>7} {'guessed':>8}")
    for ckpt in args.checkpoints:
        for kind, m in sorted(probe(ckpt, args.like, conversations, args.show).items()):
            print(
                f"{str(ckpt)[-48:]:<48} {kind:<9} {m['n']:>4} {m['call']:>6.3f} {m['forced']:>7.3f} {m['answer']:>7.3f} {m['guessed']:>8.3f}"
            )
        print(flush=True)


if __name__ == "__main__":
    main()
