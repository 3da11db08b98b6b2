"""The RL trainer on 2 DeepSpeed ranks as a Ray actor group (gloo): its update equals one rank's on the
same batch, and the async RL stage trains with it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harnessrl.config import compose
from harnessrl.engines.hf import generate
from harnessrl.metrics import read_metrics
from harnessrl.model.checkpoint import load
from harnessrl.rl.trainer import LocalTrainer, Sample, TrainerGroup
from tests.conftest import SMOKE, needs_bwrap, stage_on_base

ray = pytest.importorskip("ray")


def batch(base: Path) -> list[Sample]:
    """Three sampled completions of the base model, with advantages of both signs."""
    model, tok = load(base)
    prompts = [tok(text)["input_ids"] for text in ("def add(a, b):", "MAX_N = ", "import os\n")]
    done = generate(model, tok, prompts, 12, 1.0, 0)
    return [Sample(p, c.token_ids, c.logprobs, a) for p, c, a in zip(prompts, done, (1.0, -0.5, 0.7), strict=True)]


@pytest.mark.parametrize(
    ("minibatches", "zero_stage"), [(1, 0), (2, 0), (2, 2)]
)  # 2: a rank with no share of a mini-batch joins with zeros
def test_two_ranks_update_as_one_rank_on_the_same_batch(
    ray_session, tiny_base: dict, minibatches: int, zero_stage: int
) -> None:
    cfg = compose([*SMOKE, "stages.rl.mode=async", "stages.rl.trainer_world_size=2", "stages.rl.lr=0.01",
                   f"stages.rl.minibatches={minibatches}", f"stages.rl.zero_stage={zero_stage}"]).stages.rl  # fmt: skip
    samples = batch(tiny_base["base"])
    one, tok = load(tiny_base["base"])
    stats_one = LocalTrainer(one, None, cfg, tok.pad_token_id).update(samples)
    two = load(tiny_base["base"])[0]
    group = TrainerGroup(two, None, cfg, tok.pad_token_id, seed=0)
    try:
        stats_two = group.update(samples)
    finally:
        group.close()
    base = load(tiny_base["base"])[0].state_dict()
    a, b = one.state_dict(), two.state_dict()
    assert any(not torch.equal(a[k], base[k]) for k in a)  # both moved
    # The same update, up to float summation order (gloo's all-reduce, Adam's division by small norms).
    # Tolerances: 1e-3 of the step's norm overall, and 5% of one Adam step (lr 0.01) for any one weight:
    # Adam moves a weight whose gradient is near zero by about lr whatever its sign, so summation order
    # alone moves a few such weights by ~1e-4 (measured here with two mini-batches).
    step_a = torch.cat([(a[k] - base[k]).flatten() for k in a])
    step_b = torch.cat([(b[k] - base[k]).flatten() for k in a])
    assert (step_a - step_b).norm() / step_a.norm() < 1e-3 and (step_a - step_b).abs().max() < 5e-4
    assert stats_two.tokens == stats_one.tokens == sum(len(s.completion) for s in samples)
    assert stats_two.grad_norm == pytest.approx(stats_one.grad_norm, rel=1e-4)


@needs_bwrap
def test_the_async_stage_trains_on_a_two_rank_trainer(tiny_base: dict, tmp_path: Path) -> None:
    over = [*SMOKE, "stages.rl.mode=async", "stages.rl.trainer_world_size=2", "stages.rl.monitors.warmup_steps=0"]
    stage_on_base(tiny_base, "rl", tmp_path / "rl", over)
    rows = read_metrics(tmp_path / "rl" / "metrics.jsonl")
    assert len(rows) == compose(over).stages.rl.steps and (tmp_path / "rl" / "model.safetensors").is_file()


def test_activation_checkpointing_gives_the_same_update(tiny_base: dict) -> None:
    """Recomputing the activations in the backward pass (stages.rl.activation_checkpointing) trains the
    same weights as keeping them, within float summation order."""
    cfg = compose([*SMOKE, "stages.rl.lr=0.01"]).stages.rl
    samples = batch(tiny_base["base"])
    kept, tok = load(tiny_base["base"])
    LocalTrainer(kept, None, cfg, tok.pad_token_id).update(samples)
    recomputed = load(tiny_base["base"])[0]
    LocalTrainer(recomputed, None, cfg.model_copy(update={"activation_checkpointing": True}), tok.pad_token_id).update(
        samples
    )
    assert recomputed.is_gradient_checkpointing and not kept.is_gradient_checkpointing
    a, b = kept.state_dict(), recomputed.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    base = load(tiny_base["base"])[0].state_dict()
    assert any(not torch.equal(a[k], base[k]) for k in a)  # it trained
