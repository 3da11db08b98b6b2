"""Byte-level BPE for tiny recipes, the ChatML chat template, and drift-free rendering.

Real models keep their own tokenizer and template. A tiny model trained from scratch gets a BPE
trained on the recipe's corpus, with the chat and tool-call markers as special tokens.

Rendering for training (`render_ids`) tokenizes one segment at a time between special tokens.
Because special tokens split the text before BPE runs, this equals tokenizing the whole rendered
string, and it gives the exact span of every assistant turn without searching for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

EOS = "<|endoftext|>"
PAD = "<|pad|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [EOS, PAD, IM_START, IM_END, "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# HF convention: messages with role system/user/assistant/tool; `tools` as OpenAI function schemas.
# Tool responses render as a user turn wrapped in <tool_response>, as Qwen2.5 does, so real models
# and the tiny one read the same layout.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n<tools>\\n' }}{%- for t in tools %}{{- t | tojson }}{{- '\\n' }}{%- endfor %}"
    "{{- '</tools><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' %}{{- '<|im_start|>user\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for c in (m.tool_calls or []) %}{{- '<tool_call>' + (c.function | tojson) + '</tool_call>' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    # Words, runs of whitespace and runs of punctuation are separate pieces, so an identifier gets
    # the same ids wherever it stands ("value of MAX_N?" and "^MAX_N =" share MAX_N's ids). GPT-2's
    # split glues a leading space to the word, which makes copying a name into a tool call a
    # different-token mapping that a tiny model learns far more slowly.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\w+|\s+|[^\w\s]+"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def as_hf(tok: Tokenizer):
    """Wrap for save_pretrained: a PreTrainedTokenizerFast carrying the chat template."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=SPECIAL_TOKENS[2:],
        chat_template=CHAT_TEMPLATE,
    )


def segments(messages: list[dict], add_generation_prompt: bool = False) -> list[tuple[str, bool]]:
    """The rendered conversation as (text, is_assistant_output) pieces, in order.

    The assistant's own output is its content plus the closing <|im_end|>: the model must learn to
    stop. Their concatenation equals the chat template's output for the same messages (no tools).
    """
    out: list[tuple[str, bool]] = []
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "assistant":
            calls = "".join(f"<tool_call>{json.dumps(c['function'])}</tool_call>" for c in m.get("tool_calls") or [])
            out += [(f"{IM_START}assistant\n", False), (content + calls + IM_END, True), ("\n", False)]
        elif role == "tool":
            out.append((f"{IM_START}user\n<tool_response>\n{content}\n</tool_response>{IM_END}\n", False))
        else:
            out.append((f"{IM_START}{role}\n{content}{IM_END}\n", False))
    if add_generation_prompt:
        out.append((f"{IM_START}assistant\n", False))
    return out


def render_ids(tok, messages: list[dict], add_generation_prompt: bool = False) -> tuple[list[int], list[bool]]:
    """Token ids of a conversation and, per token, whether it is the assistant's own output.

    `tok` is a Hugging Face tokenizer: the tiny one from `as_hf`, or a real model's own.
    """
    ids: list[int] = []
    mask: list[bool] = []
    for text, trained in segments(messages, add_generation_prompt):
        piece = tok.encode(text, add_special_tokens=False)
        ids += piece
        mask += [trained] * len(piece)
    return ids, mask
