"""bench/smol.py's per-seed row from a run's files, and its test for a finished run of another config.
A synthetic run folder with known episodes stands in for a real `recipe=smol` run (an hour), so the
aggregation behind the README's SmolLM2 table is checked exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bench.smol import seed_row, stale
from harnessrl.config import compose


def episode(stage: str, suite: str, success: bool, i: int) -> dict:
    return {"asked": 0, "capped_turns": 0, "checkpoint": stage, "compactions": 0, "malformed_turns": 0,
            "parallel_turns": 0, "seed": 0, "stage": stage, "stop_reason": "final", "success": success,
            "suite": suite, "summaries": 0, "summary_tokens": 0, "task_id": f"{suite}-{i}", "tokens": 10,
            "tool_calls": 1, "turns": 2, "wall_s": 1.0}  # fmt: skip


def write_run(run: Path, solved: dict[str, dict[str, int]]) -> None:
    """`solved[stage][suite]` of 10 held-out episodes per suite (lookup over two sources) succeed."""
    (run / "report").mkdir(parents=True)
    rows = [episode(stage, f"{suite}@{('rich', 'hydra')[i % 2]}", i < n, i)
            for stage, by in solved.items() for suite, n in by.items() for i in range(10)]  # fmt: skip
    (run / "report" / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lh = {"truncation": {"success": {"value": 0.0}}, "trained_summary": {"success": {"value": 0.25}}, "n": 8}
    (run / "report" / "report.json").write_text(json.dumps({"long_horizon": lh}))
    stages = [{"stage": s, "seconds": 60.0 * m} for s, m in (("data", 1), ("sft", 7), ("rl", 30), ("eval", 12))]
    (run / "summary.json").write_text(json.dumps({"stages": stages}))
    (run / "wall.json").write_text(json.dumps({"seconds": 3000.0}))
    (run / "sft_more.json").write_text(json.dumps({"success": 0.15, "episodes": 20}))  # read, never trained here


def test_a_seed_row_is_the_eval_stage_rows_aggregated(tmp_path: Path) -> None:
    run = tmp_path / "seed0"
    write_run(run, {"base": {"lookup": 0, "edit": 0}, "sft": {"lookup": 2, "edit": 0}, "rl": {"lookup": 8, "edit": 1}})
    row = seed_row(run)
    # Over all 20 held-out episodes: base 0/20, SFT 2/20, RL 9/20; per suite over both sources.
    assert (row["base"], row["sft"], row["rl"], row["episodes"]) == (0.0, 0.1, 0.45, 20)
    assert row["gain"] == pytest.approx(35.0) and row["rl-more"] == pytest.approx(30.0)
    assert row["suites"] == {"edit": {"sft": 0.0, "rl": 0.1}, "lookup": {"sft": 0.2, "rl": 0.8}}
    assert row["minutes"] == {"data": 1.0, "sft": 7.0, "rl": 30.0, "eval": 12.0, "run": 50.0}
    assert row["long_horizon"] == {"truncation": 0.0, "trained_summary": 0.25}


def test_a_finished_run_of_another_config_is_stale(tmp_path: Path) -> None:
    run = tmp_path / "seed1"
    run.mkdir()
    now = compose(["recipe=smol", "seed=1"]).model_dump(mode="json")
    (run / "config.yaml").write_text(yaml.safe_dump(now))
    assert not stale(run, 1, [])
    assert stale(run, 1, ["stages.rl.steps=3"]) and stale(run, 2, [])
