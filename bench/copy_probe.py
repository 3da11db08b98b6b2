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
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import torch

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoints", nargs="+", type=Path)
    ap.add_argument("--data", type=Path, default=Path("data"))
    ap.add_argument("--tasks", type=int, default=128, help="held-out lookup tasks to probe")
    ap.add_argument("--show", type=int, default=0, help="print this many wrong turns per checkpoint")
    ap.add_argument("--like", type=Path, help="an HF checkpoint whose architecture DeepSpeed states load into")
    args = ap.parse_args()
    tasks = load_heldout(args.data, ["lookup"], args.tasks)
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
