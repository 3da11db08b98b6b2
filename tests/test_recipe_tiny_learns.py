"""The default recipe, whole, as `harnessrl run` runs it: CPT and SFT reach a measurable success on
held-out lookup tasks in the harness, RL then adds at least 15 points over SFT with malformed calls
under 2% and no more turns per solved task; and the long-horizon stage's trained summaries beat
truncation and the untrained summaries on the held-out long-horizon tasks, with shorter summaries,
without undoing what RL taught.

SFT copies an imperfect teacher that answers some value questions without looking (always wrongly,
data.guess_share); only the outcome reward tells the policy that looking pays. Its long-horizon
summaries are verbose on most tasks (data.long_horizon.verbose_share), and only the final reward,
through the summaries, teaches what to keep. The bars sit below what the default seed measured (see
the issue's notes for the per-seed table), so an honest change of float order on another CPU does not
fail the test, while a stage that stops learning does.
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
    sft, rl = by_stage["sft"], by_stage["rl"]
    assert sft["success"] >= 0.15, f"SFT success {sft['success']:.3f} on held-out lookup"
    assert rl["success"] >= sft["success"] + 0.15, f"RL {rl['success']:.3f} against SFT {sft['success']:.3f}"
    assert rl["malformed"] < 0.02
    assert turns_per_solved(tiny_run, "rl") <= turns_per_solved(tiny_run, "sft")
    # The long-horizon stage keeps what RL taught on lookup, within the interval.
    final = by_stage["long_horizon"]["suites"]["lookup"]["success"]
    assert final["hi"] >= rl["suites"]["lookup"]["success"]["value"]


def test_trained_summaries_beat_truncation_and_untrained_summaries(tiny_run: Path) -> None:
    lh = json.loads((tiny_run / "report" / "report.json").read_text())["long_horizon"]
    trunc, untrained, trained = (lh[m] for m in ("truncation", "untrained_summary", "trained_summary"))
    s = {m: lh[m]["success"]["value"] for m in ("truncation", "untrained_summary", "trained_summary")}
    assert s["trained_summary"] >= s["truncation"] + 0.15, s
    assert s["trained_summary"] >= s["untrained_summary"] + 0.10, s
    assert trained["summary_tokens"] <= untrained["summary_tokens"] / 3, (trained["summary_tokens"],
                                                                          untrained["summary_tokens"])  # fmt: skip
    assert trunc["summary_tokens"] == 0 and trunc["compactions"] > 0  # truncation did compact, by dropping turns
    assert lh["example"]["summaries"] and len(lh["example"]["segments"]) >= 2


def turns_per_solved(run_dir: Path, stage: str) -> float:
    rows = [json.loads(line) for line in (run_dir / "report" / "episodes.jsonl").read_text().splitlines()]
    solved = [r["turns"] for r in rows if r["stage"] == stage and r["success"]]
    assert solved, f"{stage} solved nothing"
    return sum(solved) / len(solved)
