"""Build, load and save causal LMs in Hugging Face format. Nothing is ever fetched from a hub."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, PreTrainedModel

from harnessrl.config import ArchConfig
from harnessrl.model.tokenizer import PAD, stop_ids


class CheckpointError(ValueError):
    """A checkpoint folder that is missing, incomplete or unreadable; the message names the path."""


def build_from_arch(arch: ArchConfig, pad_token_id: int, seed: int) -> PreTrainedModel:
    """A randomly initialised Llama causal LM of the given dimensions (ArchConfig says why not Qwen2)."""
    config = LlamaConfig(
        vocab_size=arch.vocab_size,
        hidden_size=arch.hidden_size,
        num_hidden_layers=arch.num_layers,
        num_attention_heads=arch.num_heads,
        num_key_value_heads=arch.num_kv_heads,
        intermediate_size=arch.intermediate_size,
        max_position_embeddings=arch.max_position_embeddings,
        tie_word_embeddings=arch.tie_word_embeddings,
        pad_token_id=pad_token_id,
    )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def load(path: Path | str, dtype: str = "float32") -> tuple[PreTrainedModel, object]:
    """Model and tokenizer from a local HF folder, with a clear error for anything missing."""
    path = Path(path)
    for needed in ("config.json", "tokenizer_config.json"):
        if not (path / needed).is_file():
            raise CheckpointError(f"{path}: not a Hugging Face checkpoint ({needed} is missing)")
    if not any(path.glob("*.safetensors")):
        raise CheckpointError(f"{path}: no *.safetensors weights")
    tok = load_tokenizer(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=getattr(torch, dtype))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: cannot load checkpoint: {e}") from None
    return model, tok


def load_tokenizer(path: Path | str):
    """The tokenizer alone (with its chat template), e.g. for a front that renders prompts while vLLM
    holds the weights."""
    path = Path(path)
    if not (path / "tokenizer_config.json").is_file():
        raise CheckpointError(f"{path}: not a Hugging Face checkpoint (tokenizer_config.json is missing)")
    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: cannot load its tokenizer: {e}") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token or PAD
    _warn_if_pre_tokenizer_replaced(path, tok)
    return tok


def _warn_if_pre_tokenizer_replaced(path: Path, tok) -> None:
    """transformers loads some model types with a tokenizer class that rebuilds the pre-tokenizer
    (qwen2 gets Qwen's regex) whatever tokenizer.json says, so the same text gets other ids than the
    tokenizer was trained with, and than a plain `tokenizers` reader gives. Say so, once, at load."""
    spec = path / "tokenizer.json"
    backend = getattr(tok, "backend_tokenizer", None)
    if not spec.is_file() or backend is None:
        return
    saved = json.loads(spec.read_text()).get("pre_tokenizer")
    if json.loads(backend.to_str()).get("pre_tokenizer") != saved:
        warnings.warn(
            f"{path}: {type(tok).__name__} does not use tokenizer.json's pre_tokenizer, so text is split "
            "differently from how this tokenizer was trained",
            stacklevel=3,
        )


def save(model: PreTrainedModel, tok, out: Path, state_dict: dict | None = None) -> None:
    """HF safetensors weights, config and tokenizer (with its chat template) into `out`.

    generation_config.json names every id that ends a turn, so a standard server (vLLM, HF generate)
    stops at <|im_end|> instead of running on to its max_tokens."""
    model.generation_config.eos_token_id = stop_ids(tok)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out, state_dict=state_dict, safe_serialization=True)
    tok.save_pretrained(out)
