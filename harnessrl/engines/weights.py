"""The trainer's weights as one safetensors blob: what every rollout engine loads in place."""

from __future__ import annotations

import torch
from safetensors.torch import load as load_blob
from safetensors.torch import save as save_blob
from torch import nn


def _unique_names(state: dict[str, torch.Tensor]) -> list[str]:
    """State-dict names with tied tensors once (the first name, as HF saves them: the input
    embedding, not the tied lm_head)."""
    seen: set[tuple[int, tuple[int, ...]]] = set()
    names = []
    for name, t in state.items():
        key = (t.data_ptr(), tuple(t.shape))
        if key not in seen:
            seen.add(key)
            names.append(name)
    return names


def weights_blob(model: nn.Module) -> bytes:
    """The model's state dict as safetensors bytes, tied tensors once (safetensors refuses aliases)."""
    state = model.state_dict()
    return save_blob({n: state[n].detach().cpu().contiguous() for n in _unique_names(state)})


def load_weights(model: nn.Module, blob: bytes) -> None:
    """Load `weights_blob` bytes into `model` in place. Only tied names may be missing (they share
    the loaded tensor); anything else missing or unknown is an error, not a silent partial load."""
    state = model.state_dict()
    tied = set(state) - set(_unique_names(state))
    weights = load_blob(blob)
    untied = sorted(tied & set(weights))  # the sender's model has its own tensor where this one shares one
    missing = sorted(set(state) - tied - set(weights))
    unknown = sorted(set(weights) - set(state))
    if untied or missing or unknown:
        raise ValueError(f"weights do not match the model: missing {missing}, unknown {unknown}, untied {untied}")
    model.load_state_dict(weights, strict=False)
