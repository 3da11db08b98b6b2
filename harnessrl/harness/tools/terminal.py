"""Tools that run commands in the sandbox: run_terminal, lint (ruff), run_tests (pytest)."""

from __future__ import annotations

import re
import shlex

from pydantic import BaseModel, ConfigDict, Field

from harnessrl.harness.sandbox import PYTHON, CommandResult
from harnessrl.harness.tools.base import Tool, ToolContext, confine, sandbox_run, show, truncate


def _status(res: CommandResult) -> str:
    if res.timed_out:
        return f"timed out after {res.wall_s:.1f}s (process tree killed)"
    return f"exit code {res.exit_code}"


class RunTerminalArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str = Field(description="A bash command, run in /workspace. No network.")
    timeout_s: float = Field(30.0, gt=0, le=600, description="Wall-clock limit in seconds.")


def run_terminal(ctx: ToolContext, args: RunTerminalArgs) -> str:
    res = sandbox_run(ctx, args.command, args.timeout_s)
    return truncate(f"[{_status(res)}]\n{res.output}", ctx.output_chars)


class LintArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(".", description="File or directory to lint, relative to the workspace root.")
    select: str | None = Field(
        None,
        pattern=r"^[A-Z]+[0-9]*(,[A-Z]+[0-9]*)*$",
        description="Only these rules: comma-separated codes or prefixes, e.g. F401,F821 or F.",
    )


def lint(ctx: ToolContext, args: LintArgs) -> str:
    # Always the harness's ruff, even in a source's environment: linting reads the code, never
    # imports it, so it needs none of the source's dependencies (and environments do not install ruff).
    target = show(ctx.workspace, confine(ctx.workspace, args.path))
    cmd = [PYTHON, "-m", "ruff", "check", "--no-cache", "--output-format", "concise"]
    cmd += ["--select", args.select] if args.select else []
    cmd += ["--", target]
    res = sandbox_run(ctx, shlex.join(cmd), None)
    return truncate(f"[{_status(res)}]\n{res.output}", ctx.output_chars)


class RunTestsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    paths: list[str] = Field(default_factory=list, description="Test files or directories; default: all.")
    keyword: str | None = Field(None, description="Only tests matching this pytest -k expression.")
    timeout_s: float = Field(120.0, gt=0, le=600)


_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")
# pytest's wall time on its summary line ("1 failed in 0.13s", "... in 61.20s (0:01:01)").
_DURATION = re.compile(r" in \d+(?:\.\d+)?s(?: \(\d+:\d\d:\d\d\))?")


def summarize_pytest(output: str) -> dict[str, int]:
    """Counts from pytest's last summary line (`== 3 passed, 1 failed in 0.1s ==`)."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    for line in reversed(output.splitlines()):
        found = _COUNT.findall(line)
        if found and (" in " in line or line.startswith("=")):
            for n, kind in found:
                key = "errors" if kind.startswith("error") else kind
                if key in counts:
                    counts[key] = int(n)
            break
    return counts


def without_durations(output: str) -> str:
    """pytest's output without its wall times: the same tests give the same text, so an expert's
    conversation (and the data folder that holds it) is the same on every build."""
    return "\n".join(_DURATION.sub("", line) if _COUNT.search(line) else line for line in output.split("\n"))


def run_tests(ctx: ToolContext, args: RunTestsArgs) -> str:
    paths = [show(ctx.workspace, confine(ctx.workspace, p)) for p in args.paths]
    # The sandbox's interpreter: a source's environment (its dependencies, and pytest) where it has one.
    python = ctx.sandbox.python if ctx.sandbox is not None else PYTHON
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--color=no"]
    if args.keyword:
        cmd += ["-k", args.keyword]
    # No plugin autoload: the task's tests should not depend on (or pay ~2 s start-up for) whatever
    # plugins the harness's own environment happens to have installed.
    command = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 " + shlex.join([*cmd, "--", *paths])
    res = sandbox_run(ctx, command, args.timeout_s)
    c = summarize_pytest(res.output)  # before the wall time goes: it marks the summary line
    head = f"[{_status(res)}] passed={c['passed']} failed={c['failed']} errors={c['errors']} skipped={c['skipped']}"
    return truncate(f"{head}\n{without_durations(res.output)}", ctx.output_chars)


TOOLS = [
    Tool(
        "run_terminal",
        "Run a bash command in the workspace sandbox (no network, limited time and memory); "
        "returns the exit code and output.",
        RunTerminalArgs,
        run_terminal,
    ),
    Tool("lint", "Run `ruff check` on a file or directory.", LintArgs, lint),
    Tool("run_tests", "Run pytest and summarize pass/fail counts.", RunTestsArgs, run_tests),
]
