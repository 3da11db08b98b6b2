"""The RL objective: group-relative advantages and a token-level clipped policy gradient with a
truncated importance-sampling correction, optionally against a frozen reference model.

Three policies meet in one token's loss (the decoupled form AReaL uses for stale data):
  behaviour  the engine that sampled the token; its logprob came back with the token
  proximal   the trainer's weights at the start of this step (a no-grad forward)
  current    the weights being updated, which move across the step's mini-batches

The PPO ratio current/proximal is clipped (DAPO clip-higher when clip_high > clip_low), so several
mini-batch updates stay near where the step began. The weight proximal/behaviour corrects both
staleness and the numeric mismatch between engine and trainer; it is truncated at `tis_cap`, so one
token the engine found unlikely cannot dominate the batch (truncated IS).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

Normalization = Literal["grpo", "dr_grpo"]


def group_advantages(rewards: torch.Tensor, group_size: int, normalization: Normalization = "grpo") -> torch.Tensor:
    """r minus its group's mean, for rewards laid out group by group. GRPO also divides by the group's
    std; Dr.GRPO does not, since that division up-weights groups whose rewards barely differ."""
    g = rewards.view(-1, group_size)
    centred = g - g.mean(dim=1, keepdim=True)
    if normalization == "grpo":
        centred = centred / (g.std(dim=1, keepdim=True) + 1e-4)
    return centred.view(-1)


@dataclass(frozen=True)
class Sample:
    """One sampled assistant turn: what the policy saw, what it generated, and how the reward judged it."""

    prompt: list[int]
    completion: list[int]
    behaviour: list[float]  # the engine's logprob of each completion token
    advantage: float


def completion_logprobs(
    model: nn.Module,
    samples: list[Sample],
    pad_id: int,
    temperature: float = 1.0,
    token_budget: int = 16384,
    entropy: list[float] | None = None,
) -> list[torch.Tensor]:
    """Per-token logprobs of each sample's completion under `model` (an HF causal LM, or a DeepSpeed
    engine around one), in the samples' order.

    Samples go through in right-padded micro-batches of similar length, at most `token_budget` padded
    tokens each: right padding leaves every real token's position and causal context as in an
    unpadded forward, and grouping by length wastes little on padding. The output projection runs
    only at completion positions: prompts (tool outputs, whole files) are most of the tokens, and
    their vocabulary-wide logits would be most of the memory and time. Logits are divided by the
    sampling temperature, as the engine did, so these are the logprobs of the distribution the tokens
    were drawn from, and the IS weight against the engine's compares like with like.

    Given a list, `entropy` gets one entry per sample (in the order computed): the token entropy of
    that same distribution in nats, summed over the completion, detached. The log-softmax is already
    there, so watching for entropy collapse costs one reduction."""
    hf = getattr(model, "module", model)
    body, head = hf.get_decoder(), hf.get_output_embeddings()
    order = sorted(range(len(samples)), key=lambda i: len(samples[i].prompt) + len(samples[i].completion))
    out: list[torch.Tensor | None] = [None] * len(samples)
    while order:
        width = len(samples[order[0]].prompt) + len(samples[order[0]].completion)
        take = 1
        while take < len(order):
            longest = len(samples[order[take]].prompt) + len(samples[order[take]].completion)
            if (take + 1) * longest > token_budget:
                break
            take, width = take + 1, longest
        chunk, order = order[:take], order[take:]
        ids = torch.full((len(chunk), width), pad_id)
        for row, i in enumerate(chunk):
            seq = samples[i].prompt + samples[i].completion
            ids[row, : len(seq)] = torch.tensor(seq)
        hidden = body(input_ids=ids).last_hidden_state
        for row, i in enumerate(chunk):
            s = samples[i]
            at = hidden[row, len(s.prompt) - 1 : len(s.prompt) - 1 + len(s.completion)]
            logp = torch.log_softmax(head(at).float() / temperature, dim=-1)
            out[i] = logp.gather(1, torch.tensor(s.completion)[:, None]).squeeze(1)
            if entropy is not None:
                entropy.append(float(-(logp.exp() * logp).sum()))
    return out  # type: ignore[return-value]


@dataclass(frozen=True)
class LossTerms:
    loss: torch.Tensor  # summed over the mini-batch's tokens; the caller divides by the step's normalizer
    clipped: int  # tokens whose ratio was clipped
    tis_truncated: int  # tokens whose IS weight hit the cap
    tis_weight_sum: float
    kl_sum: float
    tokens: int


def pg_loss(
    current: torch.Tensor,
    proximal: torch.Tensor,
    behaviour: torch.Tensor,
    advantage: float,
    clip_low: float,
    clip_high: float,
    tis_cap: float | None,
    reference: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> LossTerms:
    """One sample's token-level loss, summed over its tokens."""
    ratio = torch.exp(current - proximal)
    clipped_ratio = ratio.clamp(1 - clip_low, 1 + clip_high)
    surrogate = torch.min(ratio * advantage, clipped_ratio * advantage)
    weight = torch.exp(proximal - behaviour)
    if tis_cap is not None:
        truncated = int((weight > tis_cap).sum())
        weight = weight.clamp(max=tis_cap)
    else:
        truncated = 0
    loss = -(weight * surrogate)
    kl = torch.zeros(())
    if reference is not None:
        # k3 estimator of KL(current || reference): unbiased, always >= 0, low variance (Schulman).
        d = reference - current
        kl = torch.exp(d) - d - 1
        loss = loss + kl_coef * kl
    return LossTerms(
        loss=loss.sum(),
        clipped=int(((ratio - clipped_ratio).abs() > 1e-6).sum()),
        tis_truncated=truncated,
        tis_weight_sum=float(weight.sum()),
        kl_sum=float(kl.sum()),
        tokens=len(current),
    )
