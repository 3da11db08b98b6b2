"""Production is the training harness: `harnessrl agent --model` presents a checkpoint the harness it
was trained in, and solves the same held-out tasks the eval solved with it. The default recipe's
checkpoints come from the session's run of it (tests/conftest.py: tiny_run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnessrl.harness.spec import load_harness, system_prompt
from harnessrl.report.heldout import load_heldout
from harnessrl.tasks.checkers import answer_matches
from tests.conftest import run_cli

pytestmark = pytest.mark.slow
TASKS = 24


def final_answer(printed: str) -> str | None:
    """The agent prints `<stop reason>: <answer>` after the episode."""
    for line in printed.splitlines():
        if line.startswith(("final: ", "end_tool: ")):
            return line.split(": ", 1)[1]
    return None


def test_agent_solves_what_the_eval_solved(tiny_run: Path, capsys) -> None:
    ckpt = (tiny_run / "checkpoints" / "rl").resolve()
    harness = load_harness(ckpt)
    assert harness is not None and harness.tools == ["grep", "read_file"]
    assert harness.system_prompt == system_prompt(["grep", "read_file"])
    data = Path(json.loads((ckpt / "manifest.json").read_text())["datasets"]["data"]["path"])
    tasks = load_heldout(data, {"lookup": 1.0}, TASKS)[:TASKS]
    rows = [json.loads(line) for line in (tiny_run / "report" / "episodes.jsonl").read_text().splitlines()]
    evaluated = {r["task_id"]: r["success"] for r in rows if r["stage"] == "rl"}
    agent, agree = 0, 0
    for task in tasks:
        assert run_cli("agent", "--model", str(ckpt), "--repo", str(data / task.repo), task.instruction) == 0
        solved = answer_matches(task.check.answer or "", final_answer(capsys.readouterr().out))
        agent += solved
        agree += solved == evaluated[task.id]
    # The same greedy policy in the same harness: only batching's float order may flip an episode.
    assert agree >= TASKS - 2, f"agent and eval agree on {agree} of {TASKS} tasks"
    assert agent >= 0.5 * TASKS, f"the agent solved {agent} of {TASKS}"


def test_widening_the_tools_is_on_purpose_and_warned(tiny_run: Path, tmp_path: Path, capsys) -> None:
    ckpt = tiny_run / "checkpoints" / "rl"
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "a.py").write_text("X = 3\n")
    args = ["agent", "--model", str(ckpt), "--repo", str(tmp_path / "repo"), "--max-turns", "1"]
    assert run_cli(*args, "--tools", "grep,read_file,run_terminal", "What is the value of X?") == 0
    assert "differs from the trained harness (grep,read_file)" in capsys.readouterr().err
    assert run_cli(*args, "--tools", "grep,nope", "q") == 2
    assert "--tools: unknown tools ['nope']" in capsys.readouterr().err
