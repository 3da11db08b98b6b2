"""A miniature of a real model: its architecture at CPU sizes, random weights, built here.

`harnessrl model mini --like qwen_coder_7b -o DIR` writes a Hugging Face folder that loads exactly as
the real checkpoint does: `model_type: qwen2` (so transformers and vLLM pick their Qwen2 classes), a
byte-level BPE trained on the text it is given, and a chat template laid out like Qwen2.5's, which
writes every tool's JSON schema into the system prompt. A recipe then reads it from `model.path`,
the real model's path through the code, and only the sizes differ.

The tokenizer is trained with Qwen2's own pre-tokenizer. transformers loads every `qwen2` checkpoint
with Qwen2Tokenizer, which rebuilds the pre-tokenizer as Qwen's, whatever tokenizer.json says; a
tokenizer trained with another split would then encode text differently from how it was trained.
Nothing is downloaded: the weights are random and the tokenizer is trained on local text.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from harnessrl.harness.formats import llama3_json, mistral
from harnessrl.model.tokenizer import EOS, IM_END, IM_START, PAD, TAG_TOKENS

# The call markers that a format's real models have as single tokens of their own, and that vLLM's
# parser for the format looks up in the vocabulary (it refuses a tokenizer without them).
FORMAT_TOKENS = {"llama3_json": [llama3_json.PYTHON_TAG], "mistral": [mistral.MARK]}

# Qwen2.5's layout: the system prompt, then every tool as a JSON line inside <tools></tools> and how to
# call one; tool results grouped into one user turn of <tool_response> blocks. A call is written in the
# model's tool-call format (harnessrl/harness/formats/), both where the template says how to call and
# where it renders a message's structured tool_calls, as each model family's own template does.
_HOW_TO_CALL = {
    "hermes": "For each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}'
    "\\n</tool_call>",
    "qwen3_coder": "If you choose to call a function ONLY reply in the following format:\\n<tool_call>\\n"
    "<function=example_function_name>\\n<parameter=example_parameter>\\nvalue\\n</parameter>\\n</function>"
    "\\n</tool_call>",
    "llama3_json": 'Respond with a JSON object {"name": function name, "parameters": dictionary of argument '
    'names and values}; several calls are separated by "; ".',
    "mistral": 'Call functions as [TOOL_CALLS] [{"name": function name, "arguments": {...}}, ...].',
}
# Jinja for one message's structured tool_calls (`tool_call.function.arguments` a mapping or JSON text).
_CALLS = {
    "hermes": "{%- for tc in message.tool_calls %}{{- ('\\n' if message.content or not loop.first else '') + "
    "'<tool_call>\\n{\"name\": ' + (tc.function.name | tojson) + ', \"arguments\": ' + (tc.function.arguments "
    "if tc.function.arguments is string else tc.function.arguments | tojson) + '}\\n</tool_call>' }}{%- endfor %}",
    "qwen3_coder": "{%- for tc in message.tool_calls %}{{- ('\\n' if message.content or not loop.first else '') + "
    "'<tool_call>\\n<function=' + tc.function.name + '>\\n' }}{%- for k, v in tc.function.arguments.items() %}"
    "{{- '<parameter=' + k + '>\\n' + (v if v is string else v | tojson) + '\\n</parameter>\\n' }}{%- endfor %}"
    "{{- '</function>\\n</tool_call>' }}{%- endfor %}",
    "llama3_json": "{%- for tc in message.tool_calls %}{{- ('; ' if not loop.first else '') + '{\"name\": ' + "
    "(tc.function.name | tojson) + ', \"parameters\": ' + (tc.function.arguments if tc.function.arguments is "
    "string else tc.function.arguments | tojson) + '}' }}{%- endfor %}",
    "mistral": "{{- '[TOOL_CALLS] [' }}{%- for tc in message.tool_calls %}{{- (', ' if not loop.first else '') + "
    "'{\"name\": ' + (tc.function.name | tojson) + ', \"arguments\": ' + (tc.function.arguments if "
    "tc.function.arguments is string else tc.function.arguments | tojson) + '}' }}{%- endfor %}{{- ']' }}",
}


def chat_template(tool_format: str = "hermes") -> str:
    """Qwen2.5's chat template, with tool calls in `tool_format`."""
    return (
        "{%- if tools %}{{- '<|im_start|>system\\n' }}"
        "{%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
        "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
        "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
        "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
        "{{- '\\n</tools>\\n\\n" + _HOW_TO_CALL[tool_format].replace("'", "\\'") + "<|im_end|>\\n' }}"
        "{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- for message in messages %}"
        "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
        "{%- elif message.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (message.content or '') }}"
        "{%- if message.tool_calls %}" + _CALLS[tool_format] + "{%- endif %}{{- '<|im_end|>\\n' }}"
        "{%- elif message.role == 'tool' %}"
        "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
        "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
        "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
        "{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )


QWEN_TEMPLATE = chat_template("hermes")

# Qwen2Tokenizer's split (transformers.models.qwen2.tokenization_qwen2.PRETOKENIZE_REGEX).
QWEN_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

# The miniatures: each real model's architecture at sizes a 2-core CPU trains in seconds a step.
# The miniature's head dim is 32 (64 / 2), which vLLM's CPU attention has kernels for; one kv head
# for two query heads is grouped-query attention, as the real model has.
LIKE = {
    "qwen_coder_7b": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 4096,
        "rope_theta": 1_000_000.0,
        "tie_word_embeddings": False,
        "vocab_size": 1024,
    },
    # Qwen2.5-0.5B's dimensions, for a first run on a GPU (bench/gpu_check.py): memory and speed at a real
    # width and depth. Its vocabulary is what the local BPE learns (at most 32k), not Qwen's 152k.
    "qwen2_0_5b": {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "rope_theta": 1_000_000.0,
        "tie_word_embeddings": True,
        "vocab_size": 32768,
    },
}


def train_qwen_bpe(texts: Iterable[str], vocab_size: int, extra: Iterable[str] = ()) -> Tokenizer:
    """A byte-level BPE split as Qwen2Tokenizer splits, with the chat markers as special tokens and
    the tool-call tags (and `extra`) as single tokens."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD, IM_START, IM_END, *TAG_TOKENS, *extra],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def build_mini(like: str, texts: Iterable[str], out: Path | str, seed: int = 0, tool_format: str = "hermes") -> Path:
    """Write a miniature of `like` into `out` (created; it must not exist yet), whose chat template
    writes tool calls in `tool_format`. Returns `out`."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

    from harnessrl.io import atomic_dir
    from harnessrl.model.checkpoint import save

    if like not in LIKE:
        raise ValueError(f"--like: no miniature of {like!r} (known: {', '.join(sorted(LIKE))})")
    dims = LIKE[like]
    bpe = train_qwen_bpe(texts, dims["vocab_size"], FORMAT_TOKENS.get(tool_format, []))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=IM_END,
        pad_token=PAD,
        additional_special_tokens=[EOS, IM_START],
        chat_template=chat_template(tool_format),
    )
    config = Qwen2Config(**(dims | {"vocab_size": len(tok)}), pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with atomic_dir(out) as tmp:
        save(model, tok, tmp)
    return Path(out)
