"""Tool behaviour, output capping, and confinement of every path to the workspace."""

import os
import time
from pathlib import Path

import pytest

from harnessrl.harness import sandbox as sb
from harnessrl.harness.sandbox import Sandbox, SandboxLimits, create_workspace, remove_workspace
from harnessrl.harness.tools import ALL_TOOLS, ToolContext, ToolError, confine, files, select, truncate
from harnessrl.harness.tools.search import BM25Index, tokenize
from harnessrl.harness.tools.terminal import summarize_pytest, without_durations
from tests.conftest import needs_bwrap

UID = 61112

FILES = {
    "calc/ops.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n",
    "calc/parser.py": ("import os\n\n\ndef parse_expression(text):\n    tokens = text.split()\n    return tokens\n"),
    "tests/test_ops.py": (
        "from calc.ops import add, mul\n\n\ndef test_add():\n    assert add(2, 2) == 4\n\n\n"
        "def test_mul():\n    assert mul(2, 3) == 6\n\n\ndef test_broken():\n    assert add(1, 1) == 3\n"
    ),
    "notes.txt": "dup line\ndup line\nunique line\n",
}


@pytest.fixture
def env(tmp_path):
    snap = tmp_path / "snap"
    for rel, text in FILES.items():
        (snap / rel).parent.mkdir(parents=True, exist_ok=True)
        (snap / rel).write_text(text)
    (snap / "calc" / "__init__.py").write_text("")
    outside = tmp_path / "outside.txt"
    outside.write_text("OUTSIDE-SECRET\n")
    ws = create_workspace(snap, tmp_path / "ws", owner_uid=UID)
    box = None
    if sb._bwrap_path() and sb._bwrap_works():
        box = Sandbox(ws, SandboxLimits(wall_s=20), uid=UID)
    ctx = ToolContext(workspace=ws, sandbox=box, output_chars=4000)
    yield ctx, snap, outside
    remove_workspace(ws)


def call(ctx, name, **arguments):
    tool = ALL_TOOLS[name]
    return tool.run(ctx, tool.args.model_validate(arguments))


# -- files ---------------------------------------------------------------------------------------


def test_list_dir(env):
    ctx, _, _ = env
    assert call(ctx, "list_dir").splitlines() == ["calc/", "notes.txt", "tests/"]
    deep = call(ctx, "list_dir", depth=2)
    assert "  ops.py" in deep.splitlines() and "  test_ops.py" in deep.splitlines()
    with pytest.raises(ToolError, match="not a directory"):
        call(ctx, "list_dir", path="notes.txt")


def test_read_file_numbers_lines_and_ranges(env):
    ctx, _, _ = env
    full = call(ctx, "read_file", path="calc/ops.py")
    assert full.splitlines()[0] == "     1\tdef add(a, b):" and len(full.splitlines()) == 6
    part = call(ctx, "read_file", path="calc/ops.py", start_line=5, end_line=6)
    assert part == "     5\tdef mul(a, b):\n     6\t    return a * b"
    with pytest.raises(ToolError, match="past the end"):
        call(ctx, "read_file", path="calc/ops.py", start_line=60)
    with pytest.raises(ToolError, match="not found"):
        call(ctx, "read_file", path="nope.py")
    with pytest.raises(ToolError, match="directory"):
        call(ctx, "read_file", path="calc")
    (ctx.workspace / "blob.bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ToolError, match="binary"):
        call(ctx, "read_file", path="blob.bin")


def test_read_file_output_is_capped(env):
    ctx, _, _ = env
    (ctx.workspace / "big.txt").write_text("".join(f"line {i}\n" for i in range(5000)))
    out = call(ctx, "read_file", path="big.txt")
    assert len(out) < ctx.output_chars + 200
    assert "[... truncated" in out and "start_line/end_line" in out


def test_edit_file_unique_match_and_snapshot_untouched(env):
    ctx, snap, _ = env
    assert (
        call(ctx, "edit_file", path="calc/ops.py", old_str="a * b", new_str="a * b * 1")
        == "edited calc/ops.py at line 6"
    )
    assert "a * b * 1" in (ctx.workspace / "calc/ops.py").read_text()
    assert (snap / "calc/ops.py").read_text() == FILES["calc/ops.py"]
    with pytest.raises(ToolError, match=r"not found in calc/ops.py \(0 matches\)"):
        call(ctx, "edit_file", path="calc/ops.py", old_str="a / b", new_str="x")
    with pytest.raises(ToolError, match="matches 2 times"):
        call(ctx, "edit_file", path="notes.txt", old_str="dup line", new_str="x")
    with pytest.raises(ToolError, match="old_str is empty"):
        call(ctx, "edit_file", path="notes.txt", old_str="", new_str="x")
    assert (snap / "notes.txt").read_text() == FILES["notes.txt"]


def test_write_file_creates_and_overwrites(env):
    ctx, snap, _ = env
    assert call(ctx, "write_file", path="new/deep/x.py", content="X = 1\n").startswith("created new/deep/x.py")
    assert (ctx.workspace / "new/deep/x.py").read_text() == "X = 1\n"
    assert call(ctx, "write_file", path="notes.txt", content="fresh\n").startswith("overwrote notes.txt")
    assert (snap / "notes.txt").read_text() == FILES["notes.txt"]
    if os.geteuid() == 0:  # files the harness writes belong to the sandbox uid, so commands may edit them
        assert os.stat(ctx.workspace / "new/deep/x.py").st_uid == UID
        assert os.stat(ctx.workspace / "new/deep").st_uid == UID


# -- confinement ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", ["../outside.txt", "calc/../../outside.txt", "/etc/passwd", "/workspace/../etc", "/tmp", "a\x00b"]
)
def test_confine_rejects_escapes(env, bad):
    ctx, _, _ = env
    with pytest.raises(ToolError):
        confine(ctx.workspace, bad)


def test_confine_accepts_workspace_paths(env):
    ctx, _, _ = env
    real = os.path.realpath(ctx.workspace)
    assert confine(ctx.workspace, "/workspace/calc/ops.py") == Path(real, "calc/ops.py")
    assert confine(ctx.workspace, "/workspace") == Path(real)
    assert confine(ctx.workspace, "./calc") == Path(real, "calc")
    assert confine(ctx.workspace, "") == Path(real)


def test_symlink_escapes_are_rejected_by_every_file_tool(env):
    ctx, _, outside = env
    os.symlink(outside, ctx.workspace / "leak.txt")
    os.symlink(outside.parent, ctx.workspace / "leakdir")
    os.symlink("calc/ops.py", ctx.workspace / "inner.py")  # a symlink inside the workspace is fine
    for name, args in [
        ("read_file", {"path": "leak.txt"}),
        ("read_file", {"path": "leakdir/outside.txt"}),
        ("list_dir", {"path": "leakdir"}),
        ("edit_file", {"path": "leak.txt", "old_str": "OUTSIDE", "new_str": "x"}),
        ("write_file", {"path": "leakdir/planted.txt", "content": "x"}),
        ("write_file", {"path": "leak.txt", "content": "x"}),
    ]:
        with pytest.raises(ToolError, match="outside the workspace"):
            call(ctx, name, **args)
    assert outside.read_text() == "OUTSIDE-SECRET\n" and not (outside.parent / "planted.txt").exists()
    assert "def add" in call(ctx, "read_file", path="inner.py")
    assert "leak.txt -> " in call(ctx, "list_dir")


def test_directory_swapped_for_a_symlink_after_the_check_is_not_followed(env):
    # The race a parallel command could try: confine() checks sub/f.txt, then sub becomes a symlink.
    ctx, _, outside = env
    (ctx.workspace / "sub").mkdir()
    (ctx.workspace / "sub" / "outside.txt").write_text("inside\n")
    real = confine(ctx.workspace, "sub/outside.txt")
    os.rename(ctx.workspace / "sub", ctx.workspace / "sub_old")
    os.symlink(outside.parent, ctx.workspace / "sub")
    with pytest.raises(ToolError, match="cannot open directory 'sub'"):
        files._read_text(ctx.workspace, real)
    with pytest.raises(ToolError, match="cannot open directory 'sub'"):
        files._write(ctx.workspace, real, "overwritten")
    assert outside.read_text() == "OUTSIDE-SECRET\n"


def test_read_file_refuses_the_root_and_fifos(env):
    ctx, _, _ = env
    for path in (".", "/workspace", ""):
        with pytest.raises(ToolError, match="directory"):
            call(ctx, "read_file", path=path)
    os.mkfifo(ctx.workspace / "pipe")
    t = time.monotonic()
    with pytest.raises(ToolError, match="not a regular file"):
        call(ctx, "read_file", path="pipe")
    with pytest.raises(ToolError, match="not a regular file"):
        call(ctx, "edit_file", path="pipe", old_str="a", new_str="b")
    assert time.monotonic() - t < 1


@needs_bwrap
def test_symlink_planted_by_a_command_is_rejected(env):
    ctx, _, outside = env
    call(ctx, "run_terminal", command=f"ln -s {outside} planted && ln -s / rootdir")
    with pytest.raises(ToolError, match="outside the workspace"):
        call(ctx, "read_file", path="planted")
    with pytest.raises(ToolError, match="outside the workspace"):
        call(ctx, "read_file", path=f"rootdir{outside}")
    # search and grep do not follow symlinks out either
    ctx.retriever = None
    assert "OUTSIDE" not in call(ctx, "search", query="OUTSIDE SECRET")
    assert call(ctx, "grep", pattern="OUTSIDE") == "no matches"


# -- grep and search -----------------------------------------------------------------------------


@needs_bwrap
def test_grep(env):
    ctx, _, _ = env
    assert call(ctx, "grep", pattern=r"def \w+\(a, b\)") == "calc/ops.py:1:def add(a, b):\ncalc/ops.py:5:def mul(a, b):"
    assert call(ctx, "grep", pattern="import", glob="test_*.py") == "tests/test_ops.py:1:from calc.ops import add, mul"
    assert call(ctx, "grep", pattern="IMPORT OS", ignore_case=True, path="calc") == "calc/parser.py:1:import os"
    assert call(ctx, "grep", pattern="zzz_nothing") == "no matches"
    assert call(ctx, "grep", pattern="line", max_results=1).endswith("[2 more matches not shown]")
    with pytest.raises(ToolError):
        call(ctx, "grep", pattern="(unclosed")


@needs_bwrap
def test_grep_pathological_regex_returns(env):
    ctx, _, _ = env
    (ctx.workspace / "a.txt").write_text("a" * 5000 + "b\n")
    t = time.monotonic()
    with pytest.raises(ToolError):
        call(ctx, "grep", pattern="(a+)+$", path="a.txt")
    assert time.monotonic() - t < 10


def test_tokenize_splits_identifiers():
    assert tokenize("parseTurn") == ["parseturn", "parse", "turn"]
    assert tokenize("parse_expression(x)") == ["parse_expression", "parse", "expression", "x"]
    assert tokenize("HTTPServer 42") == ["httpserver", "http", "server", "42"]


def test_search_ranks_and_follows_edits(env):
    ctx, _, _ = env
    out = call(ctx, "search", query="parse expression tokens")
    assert out.splitlines()[0].startswith("calc/parser.py:1-6")
    assert "def parse_expression(text):" in out
    assert call(ctx, "search", query="zebra_unicorn") == "no results"
    call(ctx, "write_file", path="zoo.py", content="def zebra_unicorn():\n    pass\n")
    assert call(ctx, "search", query="zebra unicorn").startswith("zoo.py:1-2")


def test_bm25_scales_to_a_few_thousand_chunks(tmp_path):
    for i in range(300):
        (tmp_path / f"m{i}.py").write_text("".join(f"def func_{i}_{j}(x):\n    return x + {j}\n" for j in range(50)))
    index = BM25Index(tmp_path)
    t = time.monotonic()
    hits = index.search("func_123_7", k=3)
    first = time.monotonic() - t
    t = time.monotonic()
    index.search("return x", k=3)
    again = time.monotonic() - t
    assert hits[0].path == "m123.py" and first < 5 and again < 1


# -- terminal, lint, tests ------------------------------------------------------------------------


@needs_bwrap
def test_run_terminal(env):
    ctx, _, _ = env
    assert call(ctx, "run_terminal", command="echo hi; exit 4") == "[exit code 4]\nhi\n"
    out = call(ctx, "run_terminal", command="sleep 5", timeout_s=0.5)
    assert out.startswith("[timed out after")
    out = call(ctx, "run_terminal", command="seq 1 100000")
    assert len(out) < ctx.output_chars + 100 and "[... truncated" in out and out.rstrip().endswith("100000")


@needs_bwrap
def test_run_terminal_respects_the_episode_deadline(env):
    ctx, _, _ = env
    ctx.deadline = time.monotonic() + 0.5
    t = time.monotonic()
    assert call(ctx, "run_terminal", command="sleep 10", timeout_s=30).startswith("[timed out")
    assert time.monotonic() - t < 3
    with pytest.raises(ToolError, match="time is up"):
        call(ctx, "run_terminal", command="true")


@needs_bwrap
def test_lint(env):
    ctx, _, _ = env
    out = call(ctx, "lint", path="calc")
    assert out.startswith("[exit code 1]") and "calc/parser.py:1:8: F401" in out
    assert call(ctx, "lint", path="calc/ops.py").startswith("[exit code 0]")
    assert call(ctx, "lint", path="calc", select="F821").startswith("[exit code 0]")  # only the rules asked for
    assert "F401" in call(ctx, "lint", path="calc", select="F401,E")
    with pytest.raises(Exception, match="select"):
        call(ctx, "lint", path="calc", select="F401; rm -rf /")


@needs_bwrap
def test_the_sandbox_runs_the_harness_interpreter(env):
    """Inside a virtualenv, `python` in the sandbox is the venv's, not the base interpreter it was made
    from: lint and run_tests need the packages installed with harnessrl (CI runs in a fresh venv)."""
    import os
    import sys

    ctx, _, _ = env
    out = call(ctx, "run_terminal", command="python -c 'import sys; print(sys.prefix)'")
    assert out.splitlines()[-1] == os.path.realpath(sys.prefix)
    assert "ruff" in call(ctx, "run_terminal", command="python -m ruff --version")


@needs_bwrap
def test_a_venv_under_tmp_is_the_sandbox_interpreter(tmp_path: Path) -> None:
    """The sandbox's /tmp is a private tmpfs; a venv under the host's /tmp must still be visible in
    it, or `python` there silently runs as the base interpreter (seen with a checkout in /tmp), and
    /tmp must stay writable for the sandbox's uid."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        probe = (
            "from harnessrl.harness.sandbox import Sandbox; "
            f"r = Sandbox({str(tmp_path)!r}).run(\"mkdir /tmp/check && python -c 'import sys; print(sys.prefix)'\"); "
            "print(r.output.strip())"
        )
        # The venv's python, importing harnessrl from this interpreter's paths.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        out = subprocess.run([str(venv / "bin" / "python"), "-c", probe], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == os.path.realpath(venv)


@needs_bwrap
def test_run_tests_summarizes(env):
    ctx, _, _ = env
    out = call(ctx, "run_tests", paths=["tests"])
    assert out.splitlines()[0] == "[exit code 1] passed=2 failed=1 errors=0 skipped=0"
    assert "test_broken" in out
    assert out.splitlines()[-1] == "1 failed, 2 passed", "no wall time: the same tests, the same text"
    out = call(ctx, "run_tests", keyword="add")
    assert out.splitlines()[0].startswith("[exit code 0] passed=1 failed=0")


def test_pytest_wall_times_are_left_out():
    assert without_durations("x 1 in 2\n=== 3 passed, 1 failed in 61.20s (0:01:01) ===\n") == (
        "x 1 in 2\n=== 3 passed, 1 failed ===\n"
    )
    assert without_durations("2 passed, 1 warning in 0.13s") == "2 passed, 1 warning"


def test_summarize_pytest():
    assert summarize_pytest("...\n=== 3 passed, 1 failed, 2 errors in 0.12s ===") == {
        "passed": 3,
        "failed": 1,
        "errors": 2,
        "skipped": 0,
    }
    assert summarize_pytest("1 skipped, 4 passed in 1.0s") == {
        "passed": 4,
        "failed": 0,
        "errors": 0,
        "skipped": 1,
    }
    assert summarize_pytest("no tests ran in 0.01s") == {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}


def test_commands_without_sandbox_are_an_error(env):
    ctx, _, _ = env
    ctx.sandbox = None
    for name, args in [
        ("run_terminal", {"command": "ls"}),
        ("lint", {}),
        ("run_tests", {}),
        ("grep", {"pattern": "x"}),
    ]:
        with pytest.raises(ToolError, match="sandbox"):
            call(ctx, name, **args)


# -- user ----------------------------------------------------------------------------------------


def test_ask_user_and_enders(env):
    ctx, _, _ = env
    # No simulated user: the question goes to the real one (the episode ends there, stop "asked").
    assert "sent to the user" in call(ctx, "ask_user", question="which file?")
    with pytest.raises(ToolError, match="empty question"):
        call(ctx, "ask_user", question="  ")
    asked = []
    ctx.ask_user = lambda q: asked.append(q) or "use calc/ops.py"
    assert call(ctx, "ask_user", question="which file?") == "use calc/ops.py" and asked == ["which file?"]
    assert ALL_TOOLS["answer"].ends_episode and ALL_TOOLS["finish"].ends_episode
    assert not ALL_TOOLS["ask_user"].ends_episode


def test_truncate_and_select():
    assert truncate("abc", 10) == "abc"
    out = truncate("a" * 50 + "b" * 50, 20)
    assert out.startswith("a" * 10) and out.endswith("b" * 10) and "[... truncated 80 chars ...]" in out
    assert truncate("x" * 30, 10, keep="head") == "x" * 10 + "\n[... truncated 20 chars ...]"
    assert list(select(["read_file", "answer"])) == ["read_file", "answer"]
    with pytest.raises(KeyError, match="unknown tools"):
        select(["rm"])
