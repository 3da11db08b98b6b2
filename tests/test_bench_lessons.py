"""bench/lessons.py's table from its runs' files: each lesson's treatment and ablation per seed, their
differences, and the first incident on the suite the row names. Synthetic run folders with known
values stand in for the runs, so the aggregation behind the README's table is checked exactly."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from bench.lessons import WINDOW, lesson_rows, rl_dir, run_dir, spread

SEEDS = [0, 1]


def write_rl(root: Path, seed: int, name: str, malformed: list[float], incidents: list[dict]) -> None:
    out = rl_dir(root, seed, name)
    out.mkdir(parents=True)
    rows = [{"step": i + 1, "malformed_episodes/hard_lookup": m, "success/hard_lookup": 1 - m,
             "malformed_episodes/lookup": m / 2} for i, m in enumerate(malformed)]  # fmt: skip
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "incidents.jsonl").write_text("".join(json.dumps(i) + "\n" for i in incidents))


def write_report(root: Path, seed: int, name: str, success: dict[str, float], lookup: dict[str, float]) -> None:
    report = run_dir(root, seed, name) / "report"
    report.mkdir(parents=True)
    lh = {
        m: {"success": {"value": v}, "summary_tokens": 20.0 - 10.0 * (m == "trained_summary")}
        for m, v in success.items()
    }
    (report / "report.json").write_text(json.dumps({"long_horizon": lh}))
    rows = [{"stage": stage, "suite": "lookup", "success": i < 10 * share, "turns": 2, "parallel_turns": 0}
            for stage, share in lookup.items() for i in range(10)]  # fmt: skip
    (report / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def by_metric(rows: list[dict]) -> dict[str, dict]:
    return {r["metric"]: r for r in rows}


def test_the_drop_lesson_reads_each_seeds_curves_and_incidents_on_their_suite(tmp_path: Path) -> None:
    ramp = [0.1] * WINDOW + [0.5] * 10 + [0.9] * WINDOW
    pooled = {"step": 3, "monitor": "malformed", "suite": None}  # not the row's suite: never its step
    for seed in SEEDS:
        write_rl(
            tmp_path, seed, "drop", ramp, [pooled, {"step": 12 + seed, "monitor": "malformed", "suite": "hard_lookup"}]
        )
        write_rl(tmp_path, seed, "drop_batch", ramp, [])
        write_rl(tmp_path, seed, "negative", [0.05] * 20, [])
        write_rl(tmp_path, seed, "negative_batch", [0.05 * (seed + 1)] * 20, [])
    rows = by_metric(lesson_rows(tmp_path, SEEDS, ["drop"]))
    last = rows[f"hard malformed episodes, last {WINDOW} steps (group)"]
    assert last["treatment"] == pytest.approx([0.9, 0.9]) and last["difference"] == pytest.approx([0.85, 0.85])
    batch = rows[f"hard malformed episodes, last {WINDOW} steps (batch)"]
    assert batch["difference"] == pytest.approx([0.85, 0.8])
    assert spread(batch["difference"]) == f"+0.825 ± {statistics.stdev([0.85, 0.8]):.3f}"
    assert rows[f"hard success, last {WINDOW} steps (group)"]["treatment"] == pytest.approx([0.1, 0.1])
    first = rows["first malformed incident on hard_lookup, step (group)"]
    assert first["treatment"] == [12, 13] and first["ablation"] == [None, None] and first["difference"] is None


def test_the_summary_lesson_sets_the_trained_summary_against_each_control(tmp_path: Path) -> None:
    for seed in SEEDS:
        write_report(tmp_path, seed, "default", {"truncation": 0.1, "untrained_summary": 0.2,
                                                 "trained_summary": 0.5 + 0.1 * seed, "no_budget": 0.8},
                     {"rl": 0.9, "long_horizon": 0.8})  # fmt: skip
        write_report(tmp_path, seed, "frozen_summaries", {"trained_summary": 0.3}, {})
    rows = by_metric(lesson_rows(tmp_path, SEEDS, ["summary"]))
    assert rows["long-horizon success, trained / no-gradient summary"]["difference"] == pytest.approx([0.2, 0.3])
    assert rows["long-horizon success, trained summary / truncation"]["difference"] == pytest.approx([0.4, 0.5])
    assert rows["long-horizon success, trained / untrained summary"]["ablation"] == pytest.approx([0.2, 0.2])
    assert rows["long-horizon success, no budget / trained summary"]["difference"] == pytest.approx([0.3, 0.2])
    assert rows["tokens per summary, trained / untrained"]["difference"] == pytest.approx([-10.0, -10.0])
    after = rows["lookup success, after / before the long-horizon stage"]
    assert after["treatment"] == pytest.approx([0.8, 0.8]) and after["ablation"] == pytest.approx([0.9, 0.9])
