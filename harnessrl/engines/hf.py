"""The `hf` rollout engine: batched sampling with a KV cache in torch, for CPU recipes.

Every completion comes back with the exact token ids sampled and the behaviour log-probability of
each one under the distribution it was sampled from (temperature applied), which the RL loss needs
for its importance-sampling correction.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel

from harnessrl.model.tokenizer import stop_ids


@dataclass(frozen=True)
class Completion:
    token_ids: list[int]  # ends with the end-of-turn token when the model emitted one
    logprobs: list[float]  # one per token
    version: int | None = None  # the policy version whose weights sampled it, where an engine tracks one


def sample(scores: torch.Tensor, temperature: float, rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's next token, and its log-probability under the distribution it was drawn from.

    Greedy at temperature 0; otherwise by inverse CDF from one uniform number per row.
    `torch.multinomial` spends a random exponential on every vocabulary entry, which for a tiny
    model cost as much as its forward pass."""
    if temperature == 0:
        token = scores.argmax(dim=-1)
        logp = torch.log_softmax(scores, dim=-1)
    else:
        logp = torch.log_softmax(scores / temperature, dim=-1)
        cdf = logp.exp().cumsum(dim=-1)
        u = torch.rand(len(scores), 1, generator=rng) * cdf[:, -1:]
        # right=True: the first entry whose cdf exceeds u, so a token of probability 0 is never drawn
        token = torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)
    return token, logp.gather(1, token[:, None]).squeeze(1)


@torch.no_grad()
def generate(
    model: PreTrainedModel,
    tok,
    prompts: list[list[int]],
    max_new_tokens: int,
    temperature: float,
    seed: int,
    interrupt: Callable[[], bool] | None = None,
    on_token: Callable[[list[int], list[float]], None] | None = None,
) -> list[Completion]:
    """One completion per prompt; greedy when temperature == 0.

    A plain decode loop over HF's KV cache. Identical prompts (an RL group's) are prefilled once and
    their cache rows copied. After each token it asks `interrupt()` whether to end the batch there,
    leaving every unfinished completion where it is. `on_token` sees each step's token and logprob
    per row as they are sampled (a server streams them); a finished row's are padding."""
    stop = torch.tensor(stop_ids(tok))
    pad = tok.pad_token_id
    width = max(map(len, prompts))
    # Left padding keeps every prompt's last token at the same position for batched decoding.
    x = torch.full((len(prompts), width), pad)
    attn = torch.zeros_like(x)
    for i, p in enumerate(prompts):
        x[i, width - len(p) :] = torch.tensor(p)
        attn[i, width - len(p) :] = 1
    position = (attn.cumsum(-1) - 1).masked_fill(attn == 0, 1)
    slot: dict[tuple[int, ...], int] = {}
    copies = [slot.setdefault(tuple(p), len(slot)) for p in prompts]  # each row's distinct prompt
    first = [copies.index(j) for j in range(len(slot))]  # the row that prefills it
    cache = DynamicCache()
    out = model(
        input_ids=x[first], attention_mask=attn[first], position_ids=position[first], past_key_values=cache, logits_to_keep=1
    )  # fmt: skip
    cache.reorder_cache(torch.tensor(copies))
    scores = out.logits[copies, -1].float()
    position = position[:, -1:]
    rng = torch.Generator().manual_seed(seed)
    done = torch.zeros(len(prompts), dtype=torch.bool)
    tokens, logprobs = [], []
    for step in range(max_new_tokens):
        token, logp = sample(scores, temperature, rng)
        logprobs.append(logp)
        token = token.masked_fill(done, pad)
        tokens.append(token)
        if on_token is not None:
            on_token(token.tolist(), logp.tolist())
        done |= torch.isin(token, stop)
        if done.all() or step == max_new_tokens - 1 or (interrupt is not None and interrupt()):
            break
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
        position = position + 1
        out = model(input_ids=token[:, None], attention_mask=attn, position_ids=position, past_key_values=cache)
        scores = out.logits[:, -1].float()
    stops = set(stop.tolist())
    completions = []
    for row, lp in zip(torch.stack(tokens, 1).tolist(), torch.stack(logprobs, 1).tolist(), strict=True):
        end = next((i + 1 for i, t in enumerate(row) if t in stops), len(row))
        completions.append(Completion(row[:end], lp[:end]))
    return completions


def length_groups(keys: list[int], lengths: dict[int, int], slack: int = 256) -> list[list[int]]:
    """`keys` split into batches of similar prompt length, each in the order given. A batch is padded to
    its longest prompt, and every decode step attends over that width: one 3,000-token bugfix prompt
    among 100-token lookups once made a whole eval turn cost as much as 95 bugfix prompts. A prompt
    joins the batch of the shortest one before it while it is at most twice that long plus `slack`,
    so prompts of a tiny model's size (all under `slack`) stay one batch, sampled as before."""
    groups: list[list[int]] = []
    for k in sorted(keys, key=lambda k: lengths[k]):
        if groups and lengths[k] <= 2 * lengths[groups[-1][0]] + slack:
            groups[-1].append(k)
        else:
            groups.append([k])
    rank = {k: i for i, k in enumerate(keys)}
    return [sorted(g, key=rank.__getitem__) for g in groups]


class HFEngine:
    """The `hf` engine behind the rollout-engine interface the `vllm` engine also has:
    `generate(requests, seed)` and `set_weights(version, blob)`.

    Weights may arrive during a batch (set_weights from another thread; the rollout actor gives it
    its own). They interrupt the batch at the next token: the engine loads them and continues every
    unfinished completion from its prompt plus what it has so far, under the new weights, as AReaL's
    interruptible generation does. A long turn therefore never holds back a weight update, and each
    token keeps the behaviour logprob of the weights that sampled it; a completion's version is the
    oldest that sampled any of its tokens, which is what staleness is measured by.
    """

    def __init__(self, model: PreTrainedModel, tok, temperature: float) -> None:
        self.model, self.tok, self.temperature = model, tok, temperature
        self.version = 0
        self.interrupts = 0  # batches cut short by new weights
        self._stop = set(stop_ids(tok))
        self._lock = threading.Condition()
        self._incoming: tuple[int, bytes] | None = None
        self._generating = False
        model.eval()

    def generate(self, requests: list[tuple[list[int], int]], seed: int) -> list[Completion]:
        """One completion per (prompt ids, room) request, each at most `room` tokens long."""
        with self._lock:
            self._generating = True
        try:
            return self._generate(requests, seed)
        finally:
            with self._lock:
                self._generating = False
                self._load_incoming()

    def _generate(self, requests: list[tuple[list[int], int]], seed: int) -> list[Completion]:
        first = self.version  # every completion starts under these weights: its version, for staleness
        ids: list[list[int]] = [[] for _ in requests]
        lps: list[list[float]] = [[] for _ in requests]
        open_ = [k for k, (_, room) in enumerate(requests) if room > 0]
        part = 0
        while open_:
            prompts = {k: requests[k][0] + ids[k] for k in open_}
            for g, group in enumerate(length_groups(open_, {k: len(p) for k, p in prompts.items()})):
                rooms = [requests[k][1] - len(ids[k]) for k in group]
                out = generate(self.model, self.tok, [prompts[k] for k in group], max(rooms), self.temperature,
                               seed + part + 1009 * g, self._has_incoming)  # fmt: skip
                for k, c, room in zip(group, out, rooms, strict=True):
                    ids[k] += c.token_ids[:room]
                    lps[k] += c.logprobs[:room]
            open_ = [k for k in open_ if len(ids[k]) < requests[k][1] and not (ids[k] and ids[k][-1] in self._stop)]
            if not open_ or not self._has_incoming():
                break
            with self._lock:
                self._load_incoming()
                self.interrupts += 1
            part += 1
        return [Completion(i, lp, first) for i, lp in zip(ids, lps, strict=True)]

    def _has_incoming(self) -> bool:
        return self._incoming is not None

    def set_weights(self, version: int, blob: bytes) -> int:
        """Load new weights in place: now, or at the next token of the batch in flight. Returns once
        they are loaded. Of two that arrive during one token, the later wins."""
        with self._lock:
            self._incoming = (version, blob)
            if not self._generating:
                self._load_incoming()
            while self._incoming is not None:
                self._lock.wait()
        return version

    def _load_incoming(self) -> None:
        """With the lock held."""
        from harnessrl.engines.weights import load_weights

        if self._incoming is not None:
            version, blob = self._incoming
            load_weights(self.model, blob)
            self.version, self._incoming = version, None
            self._lock.notify_all()
