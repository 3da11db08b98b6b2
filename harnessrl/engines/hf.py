"""The `hf` rollout engine: batched sampling with a KV cache in torch, for CPU recipes.

Every completion comes back with the exact token ids sampled and the behaviour log-probability of
each one under the distribution it was sampled from (temperature applied), which the RL loss needs
for its importance-sampling correction.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from harnessrl.model.tokenizer import EOS, IM_END


@dataclass(frozen=True)
class Completion:
    token_ids: list[int]  # ends with the end-of-turn token when the model emitted one
    logprobs: list[float]  # one per token
    version: int | None = None  # the policy version whose weights sampled it, where an engine tracks one


@torch.no_grad()
def generate(
    model: PreTrainedModel, tok, prompts: list[list[int]], max_new_tokens: int, temperature: float, seed: int
) -> list[Completion]:
    """One completion per prompt; greedy when temperature == 0."""
    stop = [tok.convert_tokens_to_ids(t) for t in (IM_END, EOS)]
    stop = [s for s in stop if s is not None and s != tok.unk_token_id] or [tok.eos_token_id]
    pad = tok.pad_token_id
    width = max(map(len, prompts))
    # Left padding keeps every prompt's last token at the same position for batched decoding.
    x = torch.full((len(prompts), width), pad)
    attn = torch.zeros_like(x)
    for i, p in enumerate(prompts):
        x[i, width - len(p) :] = torch.tensor(p)
        attn[i, width - len(p) :] = 1
    sampling = temperature > 0
    torch.manual_seed(seed)
    out = model.generate(
        input_ids=x,
        attention_mask=attn,
        max_new_tokens=max_new_tokens,
        do_sample=sampling,
        temperature=temperature if sampling else None,
        top_k=0 if sampling else None,
        top_p=1.0 if sampling else None,
        eos_token_id=stop,
        pad_token_id=pad,
        return_dict_in_generate=True,
        output_scores=True,
    )
    new = out.sequences[:, width:]
    # scores[t] are the logits after temperature: exactly the distribution token t was drawn from.
    logp = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1)
    chosen = logp.gather(2, new[:, : logp.shape[1], None]).squeeze(2)
    completions = []
    for row, lp in zip(new.tolist(), chosen.tolist(), strict=True):
        end = next((i + 1 for i, t in enumerate(row) if t in stop), len(row))
        completions.append(Completion(row[:end], lp[:end]))
    return completions


class HFEngine:
    """The `hf` engine behind the rollout-engine interface the `vllm` engine also has:
    `generate(requests, seed)` and `set_weights(version, blob)`."""

    def __init__(self, model: PreTrainedModel, tok, temperature: float) -> None:
        self.model, self.tok, self.temperature = model, tok, temperature
        self.version = 0
        model.eval()

    def generate(self, requests: list[tuple[list[int], int]], seed: int) -> list[Completion]:
        """One completion per (prompt ids, room) request, each at most `room` tokens long."""
        out = generate(
            self.model, self.tok, [p for p, _ in requests], max(r for _, r in requests), self.temperature, seed
        )
        return [
            Completion(c.token_ids[:room], c.logprobs[:room], self.version)
            for c, (_, room) in zip(out, requests, strict=True)
        ]

    def set_weights(self, version: int, blob: bytes) -> int:
        from harnessrl.engines.weights import load_weights

        load_weights(self.model, blob)
        self.version = version
        return version
