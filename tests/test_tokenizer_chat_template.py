"""The tiny tokenizer and chat template: no re-tokenization drift between generation and training."""

from __future__ import annotations

import json

import pytest

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


def test_what_a_lookup_copies_is_matched_by_one_token(tiny_base: dict) -> None:
    """A two-layer model copies by matching the one token before the one to copy. So the pieces BPE
    may not merge across put a name's second word after its own first word (`CACHE_` `TOKEN`, never a
    `_` that every name shares), and a value after the one `= ` of its line, not after a space that
    every line has (see train_bpe). BPE then splits within pieces only."""
    _, tok = load(tiny_base["base"])

    def pieces(text: str) -> list[str]:
        return [text[a:b] for _, (a, b) in tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)]

    assert pieces("the value of CACHE_TOKEN?") == ["the", " ", "value", " ", "of", " ", "CACHE_", "TOKEN", "?"]
    assert pieces('{"pattern": "^CACHE_TOKEN ="}') == ['{"', "pattern", '": ', '"^', "CACHE_", "TOKEN", " ", '="}']
    assert pieces("a/b_c.py:13:CACHE_TOKEN = 17") == [
        "a", "/", "b_", "c", ".", "py", ":", "1", "3", ":", "CACHE_", "TOKEN", " ", "= ", "1", "7"
    ]  # fmt: skip


def test_every_loader_splits_text_as_the_tokenizer_was_trained(tiny_base: dict) -> None:
    """Our load(), vLLM's tokenizer loader (what `vllm serve` uses) and a plain `tokenizers` reader of
    tokenizer.json give the same ids. A qwen2 checkpoint would not: transformers swaps in Qwen's
    pre-tokenizer for that model type, which is why the tiny model is a Llama."""
    from tokenizers import Tokenizer
    from vllm.tokenizers import get_tokenizer

    text = CONVERSATION[3]["content"] + " the value of CACHE_TOKEN is 874"
    _, tok = load(tiny_base["base"])
    trained = Tokenizer.from_file(str(tiny_base["base"] / "tokenizer.json")).encode(text).ids
    served = get_tokenizer(str(tiny_base["base"])).encode(text, add_special_tokens=False)
    assert tok.encode(text, add_special_tokens=False) == trained == served


def test_a_qwen2_checkpoint_with_a_trained_tokenizer_warns(tiny_base: dict, tmp_path) -> None:
    from transformers import AutoModelForCausalLM, Qwen2Config

    _, tok = load(tiny_base["base"])
    config = Qwen2Config(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, intermediate_size=32)  # fmt: skip
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="does not use tokenizer.json's pre_tokenizer"):
        load(tmp_path)
