"""Byte-level BPE for tiny recipes, the ChatML chat template, and drift-free rendering.

Real models keep their own tokenizer and template. A tiny model trained from scratch gets a BPE
trained on the recipe's corpus, with the chat markers as special tokens and the tool-call tags as
single (non-special) tokens, laid out as Qwen2.5's tokenizer has them, so standard servers and their
Hermes tool parser serve it unchanged.

Rendering for training (`render_ids`) tokenizes one segment at a time between special tokens.
Because special tokens split the text before BPE runs, this equals tokenizing the whole rendered
string, and it gives the exact span of every assistant turn without searching for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from harnessrl.harness.spec import SYSTEM_PROMPT

EOS = "<|endoftext|>"  # ends a document (CPT packing)
PAD = "<|pad|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"  # IM_END ends a turn: the checkpoint's eos token
CONTROL_TOKENS = [EOS, PAD, IM_START, IM_END]
# The tool-call tags are single tokens but not *special* ones: a server's default decoding
# (skip_special_tokens) keeps them, so a standard tool parser finds the calls in the text.
TAG_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# HF convention: messages with role system/user/assistant/tool; `tools` as OpenAI function schemas.
# It renders what training renders (`segments` below, token for token):
# - the system prompt the conversation brings; with none and a request's `tools`, the training
#   harness's system prompt naming those tools, which is how the tiny model learnt its tools (it was
#   never trained on schemas, so they are not rendered);
# - an assistant turn's structured `tool_calls` as the <tool_call> text the model wrote;
# - tool responses as a user turn wrapped in <tool_response>, as Qwen2.5 does.
CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- elif tools %}"
    "{{- '<|im_start|>system\\n" + SYSTEM_PROMPT + " Tools: ' }}"
    "{%- for t in tools %}{{- (', ' if not loop.first else '') + (t.function or t).name }}{%- endfor %}"
    "{{- '.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' %}{{- '<|im_start|>user\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for c in (m.tool_calls or []) %}"
    "{%- if m.content or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": ' + (c.function.name | tojson) + ', \"arguments\": ' }}"
    "{%- if c.function.arguments is string %}{{- c.function.arguments }}"
    "{%- else %}{{- c.function.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    # The pieces BPE may not merge across are chosen so that a tiny model can copy by matching one
    # token, which is all a two-layer induction head does:
    # - a word keeps the underscore after it: MAX_N is `MAX_` `N`, so after `MAX_` the next token
    #   has one match in the question. With `MAX` `_` `N`, `_` matches every name in context, and
    #   the model copied the second word from the wrong one (SOURCE_BATCH -> SOURCE_GAMMA);
    # - a punctuation run keeps one space after it, so the value in `NAME = 874` follows the one
    #   `= ` token. With `=` ` ` apart the model copied the digit after the line number's `:`;
    # - digits are single tokens, the same in every number;
    # - no leading space on words (GPT-2's split): `of MAX_N?` and `^MAX_N =` share MAX_N's ids,
    #   where a leading space would make copying a name a mapping between different tokens.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\d|[^\W\d_]+_?|_|\s+|[^\w\s]+ ?"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=CONTROL_TOKENS + TAG_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    # The trainer adds every one of them as a special token; the tags keep their ids and stay atomic
    # (added tokens are matched before BPE either way) but decode even with skip_special_tokens.
    spec = json.loads(tok.to_str())
    for added in spec["added_tokens"]:
        added["special"] = added["content"] in CONTROL_TOKENS
    return Tokenizer.from_str(json.dumps(spec))


def as_hf(tok: Tokenizer):
    """Wrap for save_pretrained: a PreTrainedTokenizerFast carrying the chat template."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,  # what ends a turn, so a server stops there
        pad_token=PAD,
        additional_special_tokens=[EOS, IM_START],
        chat_template=CHAT_TEMPLATE,
    )


def stop_ids(tok) -> list[int]:
    """The ids that end a turn (<|im_end|>, <|endoftext|>), for every engine and generation_config."""
    stop = [tok.convert_tokens_to_ids(t) for t in (IM_END, EOS)]
    return [s for s in stop if s is not None and s != tok.unk_token_id] or [tok.eos_token_id]


def corpus_tokens(tok, texts: Iterable[str]) -> list[int]:
    """A code corpus as one token stream for CPT packing, each document ended by <|endoftext|>."""
    end = tok.convert_tokens_to_ids(EOS)
    if end is None or end == tok.unk_token_id:  # a real model without it: its own end of document
        end = tok.eos_token_id
    out: list[int] = []
    for text in texts:
        out += [*tok.encode(text, add_special_tokens=False), end]
    return out


def calls_text(tool_calls: list[dict]) -> str:
    """Structured (OpenAI-format) tool calls as the <tool_call> text the model writes; arguments may
    be a JSON string (as APIs send them) or an object."""
    parts = []
    for c in tool_calls:
        fn = c["function"]
        args = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"], ensure_ascii=False)
        parts.append(
            f'<tool_call>\n{{"name": {json.dumps(fn["name"], ensure_ascii=False)}, "arguments": {args}}}\n</tool_call>'
        )
    return "\n".join(parts)


def segments(
    messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False
) -> list[tuple[str, bool]]:
    """The rendered conversation as (text, is_assistant_output) pieces, in order.

    The assistant's own output is its content plus the closing <|im_end|>: the model must learn to
    stop. Their concatenation equals the chat template's output for the same messages and tools.
    """
    out: list[tuple[str, bool]] = []
    if messages and messages[0]["role"] == "system":
        out.append((f"{IM_START}system\n{messages[0]['content']}{IM_END}\n", False))
    elif tools:
        names = ", ".join((t.get("function") or t)["name"] for t in tools)
        out.append((f"{IM_START}system\n{SYSTEM_PROMPT} Tools: {names}.{IM_END}\n", False))
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "assistant":
            calls = calls_text(m.get("tool_calls") or [])
            body = content + ("\n" if content and calls else "") + calls
            out += [(f"{IM_START}assistant\n", False), (body + IM_END, True), ("\n", False)]
        elif role == "tool":
            out.append((f"{IM_START}user\n<tool_response>\n{content}\n</tool_response>{IM_END}\n", False))
        elif role == "user":
            out.append((f"{IM_START}user\n{content}{IM_END}\n", False))
    if add_generation_prompt:
        out.append((f"{IM_START}assistant\n", False))
    return out


def render_ids(
    tok, messages: list[dict], add_generation_prompt: bool = False, tools: list[dict] | None = None
) -> tuple[list[int], list[bool]]:
    """Token ids of a conversation and, per token, whether it is the assistant's own output.

    `tok` is a Hugging Face tokenizer: the tiny one from `as_hf`, or a real model's own.
    """
    ids: list[int] = []
    mask: list[bool] = []
    for text, trained in segments(messages, tools, add_generation_prompt):
        piece = tok.encode(text, add_special_tokens=False)
        ids += piece
        mask += [trained] * len(piece)
    return ids, mask
