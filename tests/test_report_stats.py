"""Intervals and pass@k: known values, and the same input always gives the same numbers."""

from __future__ import annotations

import typing

import pytest

from harnessrl.config import EVAL_METRICS, GateConfig
from harnessrl.report.metrics import METRICS, paired_success_diff, suite_metrics
from harnessrl.report.stats import bootstrap_ratio, pass_at_k, wilson


def test_wilson_matches_the_textbook_value_and_is_exact_at_the_ends() -> None:
    lo, hi = wilson(5, 10)  # p = 0.5, n = 10: [0.2366, 0.7634]
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    assert wilson(0, 4) == (0.0, pytest.approx(0.4899, abs=1e-4))
    assert wilson(4, 4)[1] == 1.0 and wilson(0, 0) == (0.0, 1.0)


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k(3, 0, 2) == 0.0
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)  # 1 - C(2,2)/C(3,2)
    assert pass_at_k(3, 2, 2) == 1.0


def test_bootstrap_is_deterministic_and_brackets_the_mean() -> None:
    xs = [1, 2, 2, 3, 7, 4, 4, 1]
    assert bootstrap_ratio(xs) == bootstrap_ratio(list(xs))
    lo, hi = bootstrap_ratio(xs)
    assert lo < sum(xs) / len(xs) < hi
    assert bootstrap_ratio([2, 2, 2]) == (2.0, 2.0)


def _row(task: str, seed: int, success: bool, turns: int = 2, malformed: int = 0) -> dict:
    return {"suite": "s", "task_id": task, "seed": seed, "success": success, "turns": turns, "tool_calls": 1,
            "parallel_turns": 0, "malformed_turns": malformed, "asked": False, "tokens": 10, "wall_s": 0.1}  # fmt: skip


def test_suite_metrics_point_values_and_pass_at_k_over_seeds() -> None:
    rows = [_row("a", 0, True), _row("a", 1, False), _row("b", 0, False, malformed=1), _row("b", 1, False)]
    m = suite_metrics(rows, with_pass_at_k=True)
    assert m["success"]["value"] == 0.25 and m["malformed"]["value"] == 1 / 8
    assert m["pass_at_k"]["value"] == 0.5 and m["pass_at_k"]["k"] == 2  # task a solved once in 2, b never
    assert "pass_at_k" not in suite_metrics(rows, with_pass_at_k=False)
    assert all(m[k]["lo"] <= m[k]["value"] <= m[k]["hi"] for k in METRICS if k in m)


def test_paired_difference_pairs_episodes_by_task_and_seed() -> None:
    parent = [_row("a", 0, False), _row("b", 0, False), _row("c", 0, True)]
    child = [_row("c", 0, True), _row("b", 0, True), _row("a", 0, True)]  # order does not matter
    d = paired_success_diff(child, parent)
    assert d["value"] == pytest.approx(2 / 3) and d["pairs"] == 3 and d["lo"] <= d["value"] <= d["hi"]


def test_the_config_names_exactly_the_metrics_the_report_computes() -> None:
    assert set(EVAL_METRICS) == set(METRICS)
    gate_metric = typing.get_args(GateConfig.model_fields["metric"].annotation)
    assert set(gate_metric) == set(METRICS)
