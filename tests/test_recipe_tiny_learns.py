"""The default recipe, whole, as `harnessrl run` runs it: CPT and SFT reach a measurable success on
held-out lookup tasks in the harness, and RL then adds at least 15 points of success over SFT, with
malformed calls under 2% and no more turns per solved task.

SFT copies an imperfect teacher that answers some value questions without looking (always wrongly,
data.guess_share); only the outcome reward tells the policy that looking pays. The bars sit below
what the default seed measured (+42 points; over four seeds, see the issue's notes, two more gain
46 and two whose SFT copies a constant's name too rarely gain nothing), so an honest change of float
order on another CPU does not fail the test, while an RL stage that stops learning does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli, summary

pytestmark = pytest.mark.slow


def test_tiny_recipe_sft_is_measurable_and_rl_improves_on_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert run_cli("run", f"data.dir={tmp_path / 'data'}", "--output-dir", str(run_dir),
                   "--pipeline-root", str(tmp_path / "kfp")) == 0  # fmt: skip
    assert all(r["state"] == "done" for r in summary(run_dir).values())
    report = json.loads((run_dir / "report" / "report.json").read_text())
    by_stage = {r["stage"]: r for r in report["results"]}
    assert by_stage["base"]["success"] == 0.0  # random weights: nothing is solved by chance
    sft, rl = by_stage["sft"], by_stage["long_horizon"]
    assert sft["success"] >= 0.15, f"SFT success {sft['success']:.3f} on held-out lookup"
    assert rl["success"] >= sft["success"] + 0.15, f"RL {rl['success']:.3f} against SFT {sft['success']:.3f}"
    assert rl["malformed"] < 0.02
    assert turns_per_solved(run_dir, "long_horizon") <= turns_per_solved(run_dir, "sft")
    assert report["rl_effect"]["from"] == "sft" and report["rl_effect"]["to"] == "long_horizon"


def turns_per_solved(run_dir: Path, stage: str) -> float:
    rows = [json.loads(line) for line in (run_dir / "report" / "episodes.jsonl").read_text().splitlines()]
    solved = [r["turns"] for r in rows if r["stage"] == stage and r["success"]]
    assert solved, f"{stage} solved nothing"
    return sum(solved) / len(solved)
