"""The `hf` engine: its decode loop decodes greedily what HF's `generate` does and samples each token
at the model's probability with the logprob a fresh forward gives; new weights interrupt it mid-turn: the batch goes on under them from the next token, every token keeps the logprob
of the weights that sampled it, and the completion names the oldest."""

from __future__ import annotations

import copy
import threading
from pathlib import Path

import pytest
import torch

from harnessrl.engines.hf import HFEngine, generate, length_groups, sample, stop_ids
from harnessrl.engines.weights import weights_blob
from harnessrl.model.checkpoint import load
from harnessrl.rl.trainer import Sample, completion_logprobs

SWAP_AFTER = 4  # tokens sampled by the first weights
TEXTS = ("def add(a, b):\n    return", "import os\nprint(", "class A:\n")


def test_greedy_decode_loop_matches_hf_generate(tiny_base: dict[str, Path]) -> None:
    model, tok = load(tiny_base["base"])
    prompts = [tok(t)["input_ids"] for t in TEXTS] * 4  # unequal lengths: left padding is exercised
    ours = generate(model, tok, prompts, 16, 0.0, seed=11)
    x = torch.full((len(prompts), max(map(len, prompts))), tok.pad_token_id)
    for i, p in enumerate(prompts):
        x[i, x.shape[1] - len(p) :] = torch.tensor(p)
    ref = model.generate(
        input_ids=x, attention_mask=(x != tok.pad_token_id).long(), max_new_tokens=16, do_sample=False,
        eos_token_id=sorted(stop_ids(tok)), pad_token_id=tok.pad_token_id, return_dict_in_generate=True, output_scores=True,
    )  # fmt: skip
    logp = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in ref.scores], dim=1)
    for k, c in enumerate(ours):
        row = ref.sequences[k, x.shape[1] :][: len(c.token_ids)]
        assert c.token_ids == row.tolist()
        assert torch.allclose(torch.tensor(c.logprobs), logp[k, torch.arange(len(row)), row], atol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logprobs_are_the_models_at_that_temperature(tiny_base: dict[str, Path], temperature: float) -> None:
    """With repeated prompts (prefilled once, their cache rows copied) and left padding, every token's
    logprob is what a fresh forward of prompt + completion gives: the trainer's side of the IS ratio."""
    model, tok = load(tiny_base["base"])
    prompts = [tok(t)["input_ids"] for t in TEXTS] * 4
    ours = generate(model, tok, prompts, 16, temperature, seed=11)
    samples = [Sample(p, c.token_ids, c.logprobs, 0.0) for p, c in zip(prompts, ours, strict=True)]
    with torch.no_grad():
        fresh = completion_logprobs(model, samples, tok.pad_token_id, temperature)
    for c, f in zip(ours, fresh, strict=True):
        assert torch.allclose(torch.tensor(c.logprobs), f, atol=1e-4)
    assert len({tuple(c.token_ids) for c in ours}) > 3  # copies of one prompt sample apart
    assert [c.token_ids for c in generate(model, tok, prompts, 16, temperature, seed=11)] == [c.token_ids for c in ours]


def test_sampler_draws_each_token_at_its_probability() -> None:
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, float("-inf")]).repeat(40_000, 1)
    token, logp = sample(logits, 0.7, torch.Generator().manual_seed(0))
    want = torch.softmax(logits[0] / 0.7, dim=-1)
    freq = torch.bincount(token, minlength=5) / len(token)
    assert torch.allclose(freq, want, atol=0.006)  # 40k draws: 3 standard errors of the largest share
    assert freq[4] == 0  # probability 0 is never drawn
    assert torch.allclose(logp, want.log()[token])
    assert sample(logits[:3], 0.0, torch.Generator())[0].tolist() == [0, 0, 0]


def test_weights_arriving_mid_batch_take_over_at_the_next_token(tiny_base: dict[str, Path]) -> None:
    model, tok = load(tiny_base["base"])
    new = copy.deepcopy(model)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    engine = HFEngine(model, tok, temperature=1.0)
    prompts = [tok(t)["input_ids"] for t in TEXTS]
    requests = [(p, 12) for p in prompts]

    # The trainer publishes from another thread while the engine computes token SWAP_AFTER.
    forwards, publisher = [0], []

    def publish_during_forward(*_):
        forwards[0] += 1
        if forwards[0] == SWAP_AFTER:
            t = threading.Thread(target=engine.set_weights, args=(1, weights_blob(new)))
            t.start()
            publisher.append(t)
            while engine._incoming is None:  # deposited before this token is done
                pass

    hook = model.register_forward_pre_hook(publish_during_forward)
    try:
        out = engine.generate(requests, seed=3)
    finally:
        hook.remove()
    publisher[0].join(timeout=30)
    assert not publisher[0].is_alive()  # set_weights returned once the weights were in

    assert engine.version == 1 and engine.interrupts == 1
    assert all(c.version == 0 for c in out)  # staleness counts from the oldest weights of the turn
    assert all(len(c.token_ids) == 12 or c.token_ids[-1] in engine._stop for c in out)  # the turn went on
    assert any(len(c.token_ids) > SWAP_AFTER for c in out)
    old = load(tiny_base["base"])[0]  # the first weights, untouched
    samples = [Sample(p, c.token_ids, c.logprobs, 0.0) for p, c in zip(prompts, out, strict=True)]
    with torch.no_grad():
        before, after = (completion_logprobs(m, samples, tok.pad_token_id, 1.0) for m in (old, new))
    for c, b, a in zip(out, before, after, strict=True):
        assert torch.allclose(torch.tensor(c.logprobs[:SWAP_AFTER]), b[:SWAP_AFTER], atol=1e-4)
        assert torch.allclose(torch.tensor(c.logprobs[SWAP_AFTER:]), a[SWAP_AFTER:], atol=1e-4)
        if len(c.token_ids) > SWAP_AFTER:  # one that stopped before the swap has no new-weight tokens
            assert not torch.allclose(torch.tensor(c.logprobs[SWAP_AFTER:]), b[SWAP_AFTER:], atol=1e-4)


def test_without_new_weights_a_batch_is_one_generate(tiny_base: dict[str, Path]) -> None:
    model, tok = load(tiny_base["base"])
    engine = HFEngine(model, tok, temperature=1.0)
    prompts = [tok(t)["input_ids"] for t in ("def add(a, b):\n    return", "class A:\n")]
    out = engine.generate([(p, 10) for p in prompts], seed=3)
    ref = generate(model, tok, prompts, 10, 1.0, 3)
    assert [c.token_ids for c in out] == [c.token_ids for c in ref] and engine.interrupts == 0
    assert engine.set_weights(7, weights_blob(model)) == 7 == engine.version  # idle: loads at once


def test_prompts_of_very_different_lengths_are_batched_apart(tiny_base: dict[str, Path]) -> None:
    """A long prompt is not padded into a batch of short ones; greedy completions are the same either way."""
    assert length_groups([0, 1, 2, 3], {0: 100, 1: 3000, 2: 120, 3: 250}) == [[0, 2, 3], [1]]
    assert length_groups([2, 0, 1], {0: 40, 1: 200, 2: 90}) == [[2, 0, 1]]  # a tiny model's prompts: one batch
    model, tok = load(tiny_base["base"])
    short = tok("def add(a, b):\n    return", add_special_tokens=False)["input_ids"]
    long = tok("import os\n" * 120 + "print(", add_special_tokens=False)["input_ids"]
    assert len(long) > 2 * len(short) + 256
    engine = HFEngine(model, tok, temperature=0.0)
    out = engine.generate([(short, 8), (long, 8), (short, 8)], seed=0)
    alone = [generate(model, tok, [p], 8, 0.0, 0)[0].token_ids for p in (short, long, short)]
    assert [c.token_ids for c in out] == alone
