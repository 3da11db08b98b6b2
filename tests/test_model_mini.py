"""`harnessrl model mini` builds a real model's architecture here: a folder that transformers loads as
Qwen2, whose tokenizer encodes text exactly as it was trained (Qwen2Tokenizer rebuilds the split, so
the BPE must be trained with Qwen's), and whose template renders tool schemas into the system prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from tests.conftest import run_cli


def test_the_miniature_loads_as_qwen2_and_encodes_as_trained(tmp_path: Path) -> None:
    from harnessrl.model.checkpoint import load

    out = tmp_path / "mini"
    assert run_cli("model", "mini", "--like", "qwen_coder_7b", "-o", str(out)) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["num_key_value_heads"] < config["num_attention_heads"]
    model, tok = load(out)
    assert type(tok).__name__ == "Qwen2Tokenizer" and model.config.vocab_size == len(tok)
    text = 'def f(x):\n    return MAX_N + 42  # café\n<tool_call>\n{"name": "grep"}\n</tool_call><|im_end|>'
    assert (
        tok.encode(text, add_special_tokens=False) == Tokenizer.from_file(str(out / "tokenizer.json")).encode(text).ids
    )
    tools = [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}]
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], tools=tools, add_generation_prompt=True,
                                     tokenize=False)  # fmt: skip
    assert '<tools>\n{"type": "function", "function": {"name": "grep"' in prompt


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--like", "gpt5"], "--like: no miniature of 'gpt5' (known: qwen2_0_5b, qwen_coder_7b)"),
        (["--like", "qwen_coder_7b", "--data", "."], "not a data folder (no sft.jsonl)"),
    ],
)
def test_bad_input_exits_2_naming_it(args: list[str], words: str, tmp_path: Path, capsys) -> None:
    assert run_cli("model", "mini", *args, "-o", str(tmp_path / "m")) == 2
    assert words in capsys.readouterr().err and not (tmp_path / "m").exists()


def test_an_existing_folder_is_never_overwritten(tmp_path: Path, capsys) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "keep.txt").write_text("mine")
    assert run_cli("model", "mini", "--like", "qwen_coder_7b", "-o", str(tmp_path / "m")) == 2
    assert "already exists" in capsys.readouterr().err and (tmp_path / "m" / "keep.txt").read_text() == "mine"
