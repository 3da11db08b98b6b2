"""The tiny smoke recipe end to end through kfp's local runner: outputs, cache hits, partial re-runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harnessrl.lineage.manifest import chain, read_manifest
from tests.conftest import SMOKE, run_cli, summary

pytestmark = pytest.mark.slow
STAGES = ["base", "cpt", "sft", "rl", "long_horizon", "eval"]


def test_smoke_recipe_runs_every_stage_and_writes_the_stage_contract(smoke_run: Path) -> None:
    rows = summary(smoke_run)
    assert list(rows) == STAGES
    assert all(r["state"] == "done" for r in rows.values())
    for stage in STAGES[:-1]:
        ckpt = smoke_run / "checkpoints" / stage
        assert (ckpt / "config.json").is_file() and (ckpt / "model.safetensors").is_file()
        assert (ckpt / "tokenizer.json").is_file()
        m = read_manifest(ckpt)
        assert m["stage"] == stage and len(m["config_hash"]) == 64
        assert m["code"]["commit"] and len(m["code"]["hash"]) == 64
        assert m["data_md5"].endswith(".dir")
    for stage in ("cpt", "sft", "rl", "long_horizon"):
        rows_ = [json.loads(x) for x in (smoke_run / "checkpoints" / stage / "metrics.jsonl").read_text().splitlines()]
        assert len(rows_) == {"cpt": 3, "sft": 3, "rl": 2, "long_horizon": 1}[stage]
        assert all("grad_norm" in r for r in rows_)
    # Parents chain back to the base model, in stage order.
    lineage = chain(smoke_run / "checkpoints" / "eval")
    assert [m["stage"] for _, m in lineage] == STAGES[::-1]
    assert lineage[-1][1]["parent"] is None
    report = json.loads((smoke_run / "checkpoints" / "eval" / "report.json").read_text())
    assert [r["stage"] for r in report["results"]] == STAGES[:-1]
    # The harness each trained checkpoint was trained in, for `harnessrl agent`.
    # SFT's data has hard_lookup conversations, whose tasks add ask_user; the RL stages' mixes do not.
    for stage, tools in (("sft", ["grep", "read_file", "ask_user"]), ("rl", ["grep", "read_file"]),
                         ("long_horizon", ["grep", "read_file"])):  # fmt: skip
        harness = json.loads((smoke_run / "checkpoints" / stage / "harness.json").read_text())
        assert harness["tools"] == tools, stage
    assert harness["budgets"]["context"]["policy"] == "summarize"  # the long-horizon stage's
    # The context methods on the held-out long-horizon tasks, in the long-horizon harness.
    lh = report["long_horizon"]
    for method in ("truncation", "untrained_summary", "trained_summary", "no_budget"):
        assert lh[method]["episodes"] == 2 and 0 <= lh[method]["success"]["value"] <= 1
        assert "summary_tokens" in lh[method] and len(lh[method]["rows"]) == 2
    assert lh["truncation"]["checkpoint"] == lh["untrained_summary"]["checkpoint"] == report["results"][3]["checkpoint"]
    assert lh["trained_summary"]["checkpoint"] == lh["no_budget"]["checkpoint"] == report["results"][4]["checkpoint"]
    assert lh["truncation"]["summary_tokens"] == 0 and lh["example"]["segments"]
    assert lh["no_budget"]["summaries"] == lh["no_budget"]["compactions"] == 0  # nothing to compact
    html = (smoke_run / "report" / "report.html").read_text()
    assert "Long horizon: truncation, untrained and trained summaries, no budget" in html and "Segment 1" in html
    assert (smoke_run / "config.yaml").is_file() and (smoke_run / "kfp.log").is_file()
    # The run's state root reached its stages, and does not outlive the run in this process.
    assert "HARNESSRL_STATE_ROOT" not in os.environ


def test_the_stages_read_the_data_steps_copy_not_the_checkouts_folder(smoke_run: Path, smoke_env: dict) -> None:
    from harnessrl.data.md5 import dvc_dir_md5

    built = next(smoke_env["data"].iterdir())  # data/<name>-<config hash>, built by `harnessrl run`
    for stage in STAGES[:-1]:
        m = read_manifest(smoke_run / "checkpoints" / stage)
        read = Path(m["datasets"]["data"]["path"])
        assert read.is_relative_to(smoke_env["kfp"]) and read.name == "dataset", stage
        assert m["data_md5"] == dvc_dir_md5(read) == dvc_dir_md5(built)


def test_rerun_with_nothing_changed_is_served_from_the_cache(smoke_run: Path, smoke_env: dict) -> None:
    again = smoke_env["root"] / "run-cached"
    assert (
        run_cli(
            "run",
            *SMOKE,
            f"data.dir={smoke_env['data']}",
            "--output-dir",
            str(again),
            "--pipeline-root",
            str(smoke_env["kfp"]),
        )
        == 0
    )
    first, second = summary(smoke_run), summary(again)
    assert all(r["state"] == "cached" for r in second.values())
    assert {s: r["checkpoint"] for s, r in second.items()} == {s: r["checkpoint"] for s, r in first.items()}


def test_changing_one_stage_reruns_it_and_those_after_only(smoke_run: Path, smoke_env: dict) -> None:
    changed = smoke_env["root"] / "run-rl-changed"
    assert (
        run_cli(
            "run",
            *SMOKE,
            "stages.rl.lr=0.0005",
            f"data.dir={smoke_env['data']}",
            "--output-dir",
            str(changed),
            "--pipeline-root",
            str(smoke_env["kfp"]),
        )
        == 0
    )
    rows = summary(changed)
    assert {s: r["state"] for s, r in rows.items()} == {
        "base": "cached",
        "cpt": "cached",
        "sft": "cached",
        "rl": "done",
        "long_horizon": "done",
        "eval": "done",
    }
    first = summary(smoke_run)
    assert rows["sft"]["checkpoint"] == first["sft"]["checkpoint"]
    assert rows["rl"]["checkpoint"] != first["rl"]["checkpoint"]
    assert read_manifest(Path(rows["rl"]["checkpoint"]))["config"]["stage"]["lr"] == 0.0005


def test_disabled_stages_are_skipped_and_bridged(smoke_run: Path, smoke_env: dict) -> None:
    out = smoke_env["root"] / "run-no-rl"
    assert (
        run_cli(
            "run",
            *SMOKE,
            "stages.rl.enabled=false",
            "stages.long_horizon.enabled=false",
            "stages.eval.long_horizon_tasks=0",
            f"data.dir={smoke_env['data']}",
            "--output-dir",
            str(out),
            "--pipeline-root",
            str(smoke_env["kfp"]),
        )
        == 0
    )
    rows = summary(out)
    assert list(rows) == ["base", "cpt", "sft", "eval"]
    assert rows["eval"]["state"] == "done" and rows["sft"]["state"] == "cached"
    assert read_manifest(Path(rows["eval"]["checkpoint"]))["parent"]["path"] == rows["sft"]["checkpoint"]
