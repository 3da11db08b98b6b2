"""The default recipe, whole, as `harnessrl run` runs it: CPT and SFT reach a measurable success on
held-out lookup tasks in the harness, RL then adds at least 30 points over SFT with malformed calls
under 2% and no more turns per solved task, and the long-horizon stage does not undo it; the eval
compares the three context methods on the held-out long-horizon tasks in one harness and budget.

SFT copies an imperfect teacher that answers some value questions without looking (always wrongly,
data.guess_share.lookup); only the outcome reward tells the policy that looking pays. The bars sit below what
the default seed measured (see the issue's notes for the per-seed table), so an honest change of float
order on another CPU does not fail the test, while a stage that stops learning does. What the
long-horizon stage learns at this size is in the issue's notes, not asserted here: the tiny model does
not yet solve the long-horizon suite with any of the three methods.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import summary

pytestmark = pytest.mark.slow


def test_tiny_recipe_sft_is_measurable_and_rl_improves_on_it(tiny_run: Path) -> None:
    assert all(r["state"] == "done" for r in summary(tiny_run).values())
    report = json.loads((tiny_run / "report" / "report.json").read_text())
    by_stage = {r["stage"]: r for r in report["results"]}
    assert by_stage["base"]["success"] == 0.0  # random weights: nothing is solved by chance
    # The generated held-out lookups; real code's (lookup@hydra) is reported beside them, not pooled.
    sft, rl = ({k: v["value"] for k, v in by_stage[s]["suites"]["lookup"].items() if isinstance(v, dict)}
               for s in ("sft", "rl"))  # fmt: skip
    assert sft["success"] >= 0.15, f"SFT success {sft['success']:.3f} on held-out lookup"
    # Measured: +53 points on seed 0, +45 to +54 on seeds 5-7 (README).
    assert rl["success"] >= sft["success"] + 0.30, f"RL {rl['success']:.3f} against SFT {sft['success']:.3f}"
    assert rl["malformed"] < 0.02
    assert "lookup@hydra" in by_stage["rl"]["suites"]
    assert turns_per_solved(tiny_run, "rl", "lookup") <= turns_per_solved(tiny_run, "sft", "lookup")
    # The long-horizon stage keeps what RL taught on lookup, within the eval gate's usual tolerance
    # (seed 0: 0.961 after it against 0.984, on two threads; 0.984 on one).
    final = by_stage["long_horizon"]["suites"]["lookup"]["success"]["value"]
    assert final >= rl["success"] - 0.05, f"long-horizon {final:.3f} against RL {rl['success']:.3f}"


def test_the_context_methods_run_in_the_long_horizon_harness(tiny_run: Path) -> None:
    report = json.loads((tiny_run / "report" / "report.json").read_text())
    lh = report["long_horizon"]
    harness = json.loads((tiny_run / "checkpoints" / "long_horizon" / "harness.json").read_text())
    assert lh["context"] == harness["budgets"]["context"] and lh["context"]["policy"] == "summarize"
    trunc, untrained, trained = (lh[m] for m in ("truncation", "untrained_summary", "trained_summary"))
    assert trunc["episodes"] == untrained["episodes"] == trained["episodes"] == lh["tasks"] == 64
    assert [r["task_id"] for r in trunc["rows"]] == [r["task_id"] for r in trained["rows"]]  # the same tasks
    assert trunc["summaries"] == 0 and trunc["summary_tokens"] == 0
    # SFT taught the format of a summary turn: the parent summarizes when its context fills.
    assert untrained["summaries"] > 0 and 0 < untrained["summary_tokens"] <= lh["context"]["summary_max_tokens"]
    by_stage = {r["stage"]: r["checkpoint"] for r in report["results"]}
    assert trunc["checkpoint"] == untrained["checkpoint"] == by_stage["rl"]
    assert trained["checkpoint"] == lh["no_budget"]["checkpoint"] == by_stage["long_horizon"]
    # The ceiling: the same checkpoint with the whole context, which nothing dropped or summarized.
    assert lh["no_budget"]["episodes"] == 64 and lh["no_budget"]["compactions"] == 0


def turns_per_solved(run_dir: Path, stage: str, suite: str) -> float:
    rows = [json.loads(line) for line in (run_dir / "report" / "episodes.jsonl").read_text().splitlines()]
    solved = [r["turns"] for r in rows if r["stage"] == stage and r["suite"] == suite and r["success"]]
    assert solved, f"{stage} solved nothing"
    return sum(solved) / len(solved)
