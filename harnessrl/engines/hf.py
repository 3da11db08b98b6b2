"""The `hf` rollout engine: batched sampling with a KV cache in torch, for CPU recipes."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from harnessrl.model.tokenizer import EOS, IM_END


@torch.no_grad()
def generate(
    model: PreTrainedModel, tok, prompts: list[list[int]], max_new_tokens: int, temperature: float, seed: int
) -> list[list[int]]:
    """Sample one completion per prompt (greedy when temperature == 0); returns the new token ids,
    ending at and including the turn's end marker when the model emits it."""
    stop = [tok.convert_tokens_to_ids(t) for t in (IM_END, EOS)]
    pad = tok.pad_token_id
    width = max(map(len, prompts))
    # Left padding keeps every prompt's last token at the same position for batched decoding.
    x = torch.full((len(prompts), width), pad)
    attn = torch.zeros_like(x)
    for i, p in enumerate(prompts):
        x[i, width - len(p) :] = torch.tensor(p)
        attn[i, width - len(p) :] = 1
    torch.manual_seed(seed)
    out = model.generate(
        input_ids=x,
        attention_mask=attn,
        max_new_tokens=max_new_tokens,
        do_sample=temperature > 0,
        temperature=temperature if temperature > 0 else None,
        top_k=0 if temperature > 0 else None,
        top_p=1.0 if temperature > 0 else None,
        eos_token_id=stop,
        pad_token_id=pad,
    )
    completions = []
    for row in out[:, width:].tolist():
        end = next((i + 1 for i, t in enumerate(row) if t in stop), len(row))
        completions.append(row[:end])
    return completions
