"""The tiny tokenizer and chat template: no re-tokenization drift between generation and training."""

from __future__ import annotations

import json

from harnessrl.model.checkpoint import load
from harnessrl.model.tokenizer import IM_END, render_ids, segments

CONVERSATION = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "In repo r1, what is the value of MAX_RETRIES?"},
    {
        "role": "assistant",
        "content": '<tool_call>{"name": "grep", "arguments": {"pattern": "^MAX_RETRIES ="}}</tool_call>'
        '<tool_call>{"name": "read_file", "arguments": {"path": "a/b.py"}}</tool_call>',
    },
    {"role": "tool", "content": "a/b.py:3:MAX_RETRIES = 7"},
    {"role": "tool", "content": "MAX_RETRIES = 7\n"},
    {"role": "assistant", "content": "7"},
]


def test_rendered_segments_equal_the_chat_template(tiny_base: dict) -> None:
    _, tok = load(tiny_base["base"])
    assert tok.apply_chat_template(CONVERSATION, tokenize=False) == "".join(t for t, _ in segments(CONVERSATION))
    prompt = CONVERSATION[:2]
    assert tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True) == "".join(
        t for t, _ in segments(prompt, add_generation_prompt=True)
    )


def test_retokenizing_a_trajectory_gives_the_generated_ids(tiny_base: dict) -> None:
    """Generation produces the assistant's ids after the prompt's ids; training re-renders the whole
    conversation. The assistant spans and their ids must be identical."""
    _, tok = load(tiny_base["base"])
    ids, mask = render_ids(tok, CONVERSATION)
    whole = tok.encode(tok.apply_chat_template(CONVERSATION, tokenize=False), add_special_tokens=False)
    assert ids == whole
    # What the policy generated, turn by turn: each assistant turn continues the rendered prefix.
    for turn in (2, 5):
        prefix_ids, _ = render_ids(tok, CONVERSATION[:turn], add_generation_prompt=True)
        generated = tok.encode(CONVERSATION[turn]["content"] + IM_END, add_special_tokens=False)
        span = ids[len(prefix_ids) : len(prefix_ids) + len(generated)]
        assert span == generated
        assert all(mask[len(prefix_ids) : len(prefix_ids) + len(generated)])
    assert sum(mask) == sum(
        len(tok.encode(m["content"] + IM_END, add_special_tokens=False))
        for m in CONVERSATION
        if m["role"] == "assistant"
    )


def test_structured_tool_calls_render_as_hermes_tags(tiny_base: dict) -> None:
    _, tok = load(tiny_base["base"])
    call = {"name": "grep", "arguments": {"pattern": "x"}}
    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]},
    ]
    text = tok.apply_chat_template(msgs, tokenize=False)
    assert f"<tool_call>\n{json.dumps(call)}\n</tool_call>" in text  # as the model writes calls (render_calls)
    assert text == "".join(t for t, _ in segments(msgs))


def test_special_tokens_are_single_ids(tiny_base: dict) -> None:
    _, tok = load(tiny_base["base"])
    for t in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"):
        assert len(tok.encode(t, add_special_tokens=False)) == 1
