"""`harnessrl agent` runs the production harness on a copy of a real repository and shows a diff."""

from __future__ import annotations

import io
from pathlib import Path

from harnessrl.agent import production_harness, run_agent
from harnessrl.cli import main
from harnessrl.config import Budgets
from harnessrl.harness.episode import AssistantTurn
from harnessrl.harness.protocol import render_calls
from tests.conftest import needs_bwrap


def make_repo(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    return root


class FixBug:
    """A scripted policy: read the file and list the dir in parallel, fix it, then answer."""

    def __init__(self) -> None:
        self.turn = 0

    def __call__(self, messages, tools, max_tokens):  # type: ignore[no-untyped-def]
        self.turn += 1
        if self.turn == 1:
            return AssistantTurn(
                text=render_calls([("read_file", {"path": "pkg/calc.py"}), ("list_dir", {"path": "pkg"})])
            )
        if self.turn == 2:
            edit = {"path": "pkg/calc.py", "old_str": "return a - b", "new_str": "return a + b"}
            return AssistantTurn(text=render_calls([("edit_file", edit)]))
        return AssistantTurn(text="Fixed add: it subtracted.")


@needs_bwrap
def test_agent_streams_turns_and_diffs_a_copy(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    out = io.StringIO()
    harness = production_harness(None).model_copy(update={"budgets": Budgets(max_turns=5)})
    traj, diff = run_agent(FixBug(), repo, "fix add", harness, out=out, answer_user=False)
    assert traj.outcome.stop_reason == "final" and traj.counts.parallel_turns == 1
    assert "-    return a - b" in diff and "+    return a + b" in diff
    assert (repo / "pkg" / "calc.py").read_text().endswith("return a - b\n")  # the real repo is untouched
    shown = out.getvalue()
    assert "● <tool_call>" in shown and "⤷ " in shown and "def add(a, b):" in shown
    assert shown.rstrip().endswith("● Fixed add: it subtracted.")


@needs_bwrap
def test_agent_cli_with_a_local_checkpoint(tiny_base: dict, tmp_path: Path, capsys) -> None:
    repo = make_repo(tmp_path / "repo")
    rc = main(
        [
            "agent",
            "--model",
            str(tiny_base["base"]),
            "--repo",
            str(repo),
            "--max-turns",
            "2",
            "--max-new-tokens",
            "8",
            "what does add do?",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "turns " in printed and ("(no changes)" in printed or "diff" in printed)


def test_agent_cli_bad_input_is_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["agent", "--model", str(tmp_path), "--repo", str(tmp_path / "nope"), "x"]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert main(["agent", "--model", str(tmp_path), "--repo", str(tmp_path), "x"]) == 2
    assert "not a Hugging Face checkpoint" in capsys.readouterr().err


@needs_bwrap
def test_agent_flags_set_the_context_policy(tiny_base: dict, tmp_path: Path, capsys) -> None:
    repo = make_repo(tmp_path / "repo")
    base = [
        "agent",
        "--model",
        str(tiny_base["base"]),
        "--repo",
        str(repo),
        "--max-turns",
        "1",
        "--max-new-tokens",
        "4",
    ]
    assert main([*base, "--context", "summarize", "what does add do?"]) == 0
    captured = capsys.readouterr()
    assert "no harness.json; the agent gets every tool" in captured.err  # the base model was trained in none
    assert "summaries 0" in captured.out
    assert main([*base, "--context", "summarize", "--context-budget", "100", "--summary-trigger", "90", "q"]) == 2
    assert "--context summarize: trigger + summary_max_tokens must fit in the budget" in capsys.readouterr().err


def test_agent_cli_refuses_flags_that_would_do_nothing(tiny_base: dict, tmp_path: Path, capsys) -> None:
    repo = make_repo(tmp_path / "repo")
    assert main(["agent", "--model", str(tiny_base["base"]), "--harness", str(tmp_path), "--repo", str(repo), "q"]) == 2
    assert "--harness is for --endpoint" in capsys.readouterr().err
    args = ["agent", "--endpoint", "http://127.0.0.1:9/v1", "--served-model", "m", "--repo", str(repo)]
    assert main([*args, "--context", "truncate", "q"]) == 2
    assert "needs --context-budget" in capsys.readouterr().err
    (tmp_path / "harness.json").write_text('{"tools": ["grep"], "system_prompt": "s", "budgets": {"max_turns": 0}}')
    assert main([*args, "--harness", str(tmp_path / "harness.json"), "q"]) == 2
    assert "harness.json: field 'budgets.max_turns'" in capsys.readouterr().err
