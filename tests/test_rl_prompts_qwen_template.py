"""Under a real chat template the trainer sees exactly the prompts the rollout sampled from.

The tiny model's template leaves the tool schemas out (its system prompt names the tools), which hid a
bug: training re-rendered each turn's prompt without the tools, while the rollout rendered them. Here
the tiny model gets the miniatures' chat template, built like Qwen2.5's, which writes every tool's JSON schema into the
system prompt and groups tool responses into one user turn, and an RL rollout's training samples are
checked token for token against what that template renders, turn by turn. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnessrl.config import Budgets, compose
from harnessrl.engines.hf import Completion, HFEngine
from harnessrl.harness.episode import BASE_UID
from harnessrl.harness.protocol import render_calls
from harnessrl.model.checkpoint import build_from_arch, load
from harnessrl.model.mini import QWEN_TEMPLATE
from harnessrl.model.prompts import PromptRenderer
from harnessrl.model.tokenizer import render_ids
from harnessrl.report.heldout import load_heldout
from harnessrl.rl.loop import turn_samples
from harnessrl.rl.rollouts import LocalRollouts
from tests.conftest import SMOKE, needs_bwrap


class CallsFirst:
    """The engine, except that the first turn is a grep call (random weights would answer at once), so
    the later turns' prompts hold an assistant turn and a tool response."""

    def __init__(self, engine, tok) -> None:
        self.engine, self.tok, self.calls = engine, tok, 0

    def generate(self, requests, seed):
        self.calls += 1
        if self.calls > 1:
            return self.engine.generate(requests, seed)
        ids = self.tok.encode(render_calls([("grep", {"pattern": "^X ="})]) + "<|im_end|>", add_special_tokens=False)
        return [Completion(ids, [-1.0] * len(ids), 0) for _ in requests]


@needs_bwrap
def test_training_prompt_ids_are_the_rollout_prompt_ids_turn_by_turn(tiny_base: dict[str, Path]) -> None:
    _, tok = load(tiny_base["base"])
    tok.chat_template = QWEN_TEMPLATE
    # Room for the schemas, which the tiny BPE spends ~1500 tokens on: a fresh tiny model with 4k positions.
    arch = compose(SMOKE).model.arch.model_copy(update={"max_position_embeddings": 4096})
    model = build_from_arch(arch, tok.pad_token_id, seed=0)
    renderer = PromptRenderer(tok, model.config.max_position_embeddings)
    task = load_heldout(tiny_base["data"], {"lookup": 1.0}, 1)[0]
    budgets = Budgets(max_turns=3, max_turn_tokens=8, max_tokens=24)
    rollouts = LocalRollouts(CallsFirst(HFEngine(model, tok, 1.0), tok), renderer, tiny_base["data"], 2, budgets,
                             False, BASE_UID)  # fmt: skip
    rollouts.submit(task, seed=3)
    (group,) = rollouts.ready(1)
    checked = 0
    for rollout in group:
        traj = rollout.trajectory
        starts = [i for i, m in enumerate(traj.messages) if m["role"] == "assistant"]
        samples = turn_samples(traj, advantage=1.0)
        assert len(samples) == len(traj.turns) == len(starts) > 1
        for sample, turn, at in zip(samples, traj.turns, starts, strict=True):
            expected = tok.apply_chat_template(traj.messages[:at], tools=traj.tools, add_generation_prompt=True,
                                               tokenize=True, return_dict=False)  # fmt: skip
            assert sample.prompt == list(expected)
            assert sample.completion == turn.token_ids and sample.behaviour == turn.logprobs
            checked += 1
        # The tools really were in the prompt: every schema, as JSON, in the system turn.
        text = tok.decode(samples[0].prompt)
        assert all(f'"name": "{t["function"]["name"]}"' in text for t in traj.tools) and "<tools>" in text
    assert checked >= 4


def test_sft_trains_each_turn_on_the_prompt_a_rollout_would_give_it(tiny_base: dict[str, Path]) -> None:
    """SFT under the same template: before each assistant turn of an SFT conversation, the trained ids
    are the prompt that turn's rollout would get (the tool schemas included), and the labelled ids
    are the turn itself, to its end-of-turn token. SFT once rendered every model's conversations in
    the tiny ChatML, with no schemas: a model with its own template trained on prompts it never saw
    again, and the Qwen2 miniature answered served requests with a bare `</tool_call>`."""
    from harnessrl.data.build import read_jsonl
    from harnessrl.harness.protocol import render_tools
    from harnessrl.harness.spec import system_prompt, tools_named
    from harnessrl.harness.tools import select

    _, tok = load(tiny_base["base"])
    tok.chat_template = QWEN_TEMPLATE
    renderer = PromptRenderer(tok, 1 << 16)
    row = next(r for r in read_jsonl(tiny_base["data"] / "sft.jsonl") if r["suite"] == "lookup"
               and sum(m["role"] == "assistant" for m in r["messages"]) > 1)  # fmt: skip
    messages = row["messages"]
    names = tools_named(messages[0]["content"])
    assert names and system_prompt(names) == messages[0]["content"]
    tools = render_tools(select(names))
    ids, mask = renderer.conversation_ids(messages, tools)
    assert len(ids) == len(mask) and ids == list(tok.apply_chat_template(messages, tools=tools, tokenize=True,
                                                                         return_dict=False))  # fmt: skip
    starts = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    spans, k = [], 0
    while k < len(mask):  # the labelled runs, in order
        if mask[k]:
            end = next((j for j in range(k, len(mask)) if not mask[j]), len(mask))
            spans.append((k, end))
            k = end
        else:
            k += 1
    assert len(spans) == len(starts)
    for (a, b), at in zip(spans, starts, strict=True):
        assert ids[:a] == renderer.prompt_ids(messages[:at], tools)
        assert tok.decode(ids[a:b]) == messages[at]["content"] + "<|im_end|>"
    # The tiny model's own ChatML is rendered as before, segment by segment.
    _, chatml = load(tiny_base["base"])
    assert PromptRenderer(chatml, 1 << 16).conversation_ids(messages, tools) == render_ids(chatml, messages)


def test_a_template_that_rewrites_earlier_turns_is_refused_for_sft(tiny_base: dict[str, Path]) -> None:
    """A template that renders an earlier assistant turn differently once a later one follows (as
    templates that strip past reasoning do) cannot be trained turn by turn as it prompts: refused,
    naming the message."""
    _, tok = load(tiny_base["base"])
    tok.chat_template = (
        "{%- for m in messages %}<|im_start|>{{ m.role }}\n"
        "{%- if m.role == 'assistant' and not loop.last %}(earlier turn){% else %}{{ m.content }}{% endif %}"
        "<|im_end|>\n{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
    )
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                {"role": "user", "content": "r"}, {"role": "assistant", "content": "b"}]  # fmt: skip
    with pytest.raises(ValueError, match="assistant message 3"):
        PromptRenderer(tok, 1 << 16).conversation_ids(messages)
