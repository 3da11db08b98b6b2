"""`harnessrl tasks ...` and `harnessrl tools exec`: outputs, exit codes, and errors that name the problem."""

import io
import json
import sys
from pathlib import Path

import pytest

from harnessrl.cli import main
from harnessrl.harness.formats import FORMATS
from harnessrl.harness.protocol import render_calls
from tests.conftest import needs_bwrap  # fails under CI rather than skipping


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "mod.py").write_text("LIMIT = 7\n\n\ndef f(x):\n    return x + LIMIT\n")
    return ws


def tools_exec(
    monkeypatch, capsys, workspace, message: str, *extra: str, parsed: bool = False
) -> tuple[int, dict | None, str]:
    """The exit code, the result line (or with parsed=True the parse line printed before it), stderr."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(message.encode())))
    rc = main(["tools", "exec", "--workspace", str(workspace), *extra])
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    return rc, (lines[0 if parsed else -1] if lines else None), err


@needs_bwrap
def test_tools_exec_tool_calls(monkeypatch, capsys, workspace):
    message = render_calls(
        [
            ("grep", {"pattern": "^LIMIT ="}),
            ("write_file", {"path": "pkg/new.py", "content": "X = 1\n"}),
            ("read_file", {"path": "missing.py"}),
            ("run_terminal", {"command": "python -c 'from pkg.mod import f; print(f(1))'"}),
        ]
    )
    rc, out, _ = tools_exec(monkeypatch, capsys, workspace, message)
    assert rc == 0 and out["kind"] == "tool_calls" and out["errors"] == []
    assert [(r["name"], r["ok"]) for r in out["results"]] == [
        ("grep", True),
        ("write_file", True),
        ("read_file", False),
        ("run_terminal", True),
    ]
    assert out["results"][0]["output"] == "pkg/mod.py:1:LIMIT = 7"
    assert out["results"][3]["output"].endswith("8\n")
    assert not (workspace / "pkg" / "new.py").exists()  # the calls ran on a copy


def test_tools_exec_final_and_malformed(monkeypatch, capsys, workspace):
    rc, out, _ = tools_exec(monkeypatch, capsys, workspace, "LIMIT is 7.")
    assert rc == 0 and out == {"kind": "final", "errors": [], "results": []}
    rc, out, _ = tools_exec(monkeypatch, capsys, workspace, '<tool_call>{"name": "grep"}</tool_call> and text')
    assert rc == 0 and out["kind"] == "malformed" and out["results"] == []
    assert any("text outside the tool calls" in e for e in out["errors"])
    assert any("call 1 (grep): invalid arguments: pattern" in e for e in out["errors"])
    rc, out, _ = tools_exec(
        monkeypatch, capsys, workspace, render_calls([("grep", {"pattern": "x"})]), "--tools", "read_file"
    )
    assert rc == 0 and out["kind"] == "malformed" and "unknown tool 'grep'" in out["errors"][0]


@needs_bwrap
@pytest.mark.parametrize("name", ["qwen3_coder", "llama3_json", "mistral"])
def test_tools_exec_reads_a_turn_in_any_format(monkeypatch, capsys, workspace, name):
    message = FORMATS[name].render_calls(
        [("grep", {"pattern": "^LIMIT ="}), ("read_file", {"path": "pkg/mod.py", "end_line": 1})]
    )
    rc, first, _ = tools_exec(monkeypatch, capsys, workspace, message, "--format", name, parsed=True)
    assert rc == 0 and first["format"] == name and first["kind"] == "tool_calls"
    assert first["calls"] == [
        {"name": "grep", "arguments": {"pattern": "^LIMIT ="}},
        {"name": "read_file", "arguments": {"path": "pkg/mod.py", "end_line": 1}},
    ]
    rc, out, _ = tools_exec(monkeypatch, capsys, workspace, message, "--format", name)
    assert [r["output"] for r in out["results"]] == ["pkg/mod.py:1:LIMIT = 7", "     1\tLIMIT = 7"]
    # The same calls in Hermes are not this format's calls: a malformed turn, with its class.
    hermes = render_calls([("grep", {"pattern": "x"})])
    rc, first, _ = tools_exec(monkeypatch, capsys, workspace, hermes, "--format", name, parsed=True)
    assert rc == 0 and first["kind"] in ("malformed", "final")
    if first["kind"] == "malformed":
        assert len(first["classes"]) == len(first["errors"]) > 0


def test_tools_exec_bad_input(monkeypatch, capsys, tmp_path, workspace):
    rc, out, err = tools_exec(monkeypatch, capsys, tmp_path / "nope", "hi")
    assert rc == 2 and out is None and "--workspace" in err and "nope" in err
    rc, out, err = tools_exec(monkeypatch, capsys, workspace, "hi", "--tools", "grep,teleport")
    assert rc == 2 and "teleport" in err
    rc, out, err = tools_exec(monkeypatch, capsys, workspace, "hi", "--format", "xml")
    assert rc == 2 and out is None and "--format" in err and "'xml'" in err and "qwen3_coder" in err


def test_tasks_build_and_errors(capsys, tmp_path):
    assert main(["tasks", "build", "--suite", "lookup", "--seed", "1", "--num", "6", "-o", str(tmp_path / "s")]) == 0
    assert "1 heldout" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "s" / "tasks").iterdir()) == ["heldout.jsonl", "train.jsonl"]
    assert (
        main(["tasks", "build", "--suite", "bugfix", "-o", str(tmp_path / "x"), "--source", str(tmp_path / "no")]) == 2
    )
    err = capsys.readouterr().err
    assert "source 'no':" in err and "does not exist" in err
    assert main(["tasks", "expert", str(tmp_path / "missing")]) == 2
    assert "missing: suite directory not found" in capsys.readouterr().err
    (tmp_path / "s" / "tasks" / "train.jsonl").write_text('{"id": "x"}\n')
    assert main(["tasks", "expert", str(tmp_path / "s")]) == 2
    assert "train.jsonl:1: field 'suite': Field required" in capsys.readouterr().err


@needs_bwrap
def test_tasks_expert_reports_success(capsys, tmp_path):
    assert main(["tasks", "build", "--suite", "long_horizon", "--num", "2", "-o", str(tmp_path / "s")]) == 0
    assert main(["tasks", "expert", str(tmp_path / "s"), "--workers", "2"]) == 0
    assert "long_horizon: expert success 1.000 over 2 tasks" in capsys.readouterr().out


@needs_bwrap
def test_expert_reports_whether_the_long_horizon_suite_needs_summaries(tmp_path: Path, capsys) -> None:
    assert main(["tasks", "build", "--suite", "long_horizon", "--num", "4", "-o", str(tmp_path / "lh")]) == 0
    capsys.readouterr()
    assert main(["tasks", "expert", str(tmp_path / "lh"), "--context-budget", "130", "--summary-trigger", "95"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("long_horizon: expert success 0.000 over 4 tasks without context management")
    assert lines[1].startswith("long_horizon: expert success 1.000 over 4 tasks with summaries")
