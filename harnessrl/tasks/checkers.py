"""Checkers: did the episode succeed? Decided by running code against the workspace, or, for pure
question tasks, by comparing the final answer with the known one.

A code check runs the task's hidden test file (pytest style: test_* functions of plain asserts) in the
sandbox, from a private /tmp, never from the workspace: the agent can edit the repo's own tests but not
the check. A ten-line runner calls the test functions instead of pytest: 0.15 s instead of 0.5 s per
check, which every RL episode pays. Imports are pinned too: only the task's own top-level packages
come from /workspace (a meta-path finder in the runner), so a `json.py` the agent drops there cannot
shadow the stdlib, and the workspace copy of a package wins even where the same package is installed.
Workspace modules are compiled from source, so a planted .pyc never stands in for the source.

An imported SWE-bench task (kind "swe") is checked as SWE-bench does: its hidden test files, as they
are after the row's test_patch, are written over the workspace (by rename, so a hardlinked snapshot is
never written in place), then its FAIL_TO_PASS and PASS_TO_PASS ids run under real pytest there.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import json
import os
import re
import secrets
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harnessrl.harness.sandbox import DEFAULT_UID, SANDBOX_ROOT, Sandbox, SandboxLimits, replace_file
from harnessrl.harness.tools.base import confine, dir_beneath
from harnessrl.harness.tools.terminal import PYTHON, summarize_pytest
from harnessrl.tasks.task import Check, Task

# (workspace, final answer or None) -> (success, details). Raising counts as failure.
Checker = Callable[[Path, str | None], tuple[bool, dict[str, Any]]]

WORKSPACE_IMPORTS = """\
import importlib
import importlib.machinery
import inspect
import os
import runpy
import sys
import traceback

PACKAGES = set({packages!r})
for _name in [m for m in sys.modules if m.split(".")[0] in PACKAGES]:
    del sys.modules[_name]  # an installed copy something imported at startup


class SourceOnly(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname):  # compile the source; never trust a .pyc found in the workspace
        return compile(self.get_data(self.path), self.path, "exec", dont_inherit=True)


class WorkspaceFinder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] not in PACKAGES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path if "." in name else ["{root}"])
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = SourceOnly(spec.loader.name, spec.loader.path)
        return spec


sys.meta_path.insert(0, WorkspaceFinder)
"""

RUNNER = """

def main():
    with open("nonce") as f:
        nonce = f.read()
    os.unlink("nonce")
    tests = runpy.run_path("test_check.py", run_name="test_check")
    passed, failed = [], 0
    for name in sorted(n for n in tests if n.startswith("test_")):
        try:
            tests[name]()
            passed.append(name)
        except Exception:
            failed += 1
            print("FAILED", name)
            traceback.print_exc(limit=-1)
    print(f"== {failed} failed, {len(passed)} passed {nonce} ==", ",".join(passed), flush=True)
    raise SystemExit(1 if failed or not passed else 0)


main()
"""
# The verdict is the runner's last line, stamped with a nonce the workspace never sees on disk: a
# module that prints a summary of its own and exits (os._exit(0) on import) forges no pass. Code in
# the same process could still dig the nonce out of the runner's frame; docs/data.md says so.
_VERDICT = re.compile(r"^== (\d+) failed, (\d+) passed (\S+) == ?(\S*)$", re.MULTILINE)

ENV = "PYTHONHASHSEED=0"


def _drop(name: str, text: str) -> str:
    # base64 through the shell: no quoting of the file's contents can go wrong.
    return f"printf %s {base64.b64encode(text.encode()).decode()} | base64 -d > {name}"


def python_command(files: dict[str, str], argv: list[str], python: str = PYTHON, cwd: str = "/tmp/check") -> str:
    """A shell command that writes `files` into a fresh /tmp/check and runs `python` (the harness's
    own, or a source environment's) with `-P argv` in `cwd` (-P: the cwd is not put on sys.path), the
    workspace's packages importable. HARNESSRL_PYTHON names the harness's own interpreter, for a
    check that needs the harness's tools (ruff) whatever interpreter runs it."""
    drops = " && ".join(_drop(n, t) for n, t in files.items())
    run = f"{ENV} HARNESSRL_PYTHON={shlex.quote(PYTHON)} {shlex.join([python, '-P', *argv])}"
    return f"mkdir -p /tmp/check && cd /tmp/check && {drops} && cd {cwd} && {run}"


def check_sandbox(workspace: Path, timeout_s: float, python: str = PYTHON) -> Sandbox:
    """A sandbox over the workspace as an unprivileged uid: its owner, or nobody when root owns it."""
    uid = os.stat(workspace).st_uid or DEFAULT_UID
    return Sandbox(workspace, SandboxLimits(wall_s=timeout_s, cpu_s=int(timeout_s) + 1), uid=uid, python=python)


def run_check(
    workspace: Path, test: str, packages: list[str], timeout_s: float = 60.0, python: str = PYTHON
) -> tuple[bool, dict[str, Any]]:
    """Run the hidden test file against the workspace with `python`; success is every test function passing."""
    imports = WORKSPACE_IMPORTS.format(packages=sorted(packages), root=SANDBOX_ROOT)
    nonce = secrets.token_hex(16)
    files = {"test_check.py": test, "run_check.py": imports + RUNNER, "nonce": nonce}
    res = check_sandbox(workspace, timeout_s, python).run(python_command(files, ["run_check.py"], python))
    verdicts = [v for v in _VERDICT.findall(res.output) if v[2] == nonce]
    failed, ran = (int(verdicts[-1][0]), verdicts[-1][3].split(",")) if verdicts else (0, [])
    # Every test function of the file must have run and passed: a module that ends the process
    # part-way (os._exit on import) leaves no stamped verdict, or fewer passes than the file holds.
    wanted = test_functions(test)
    ok = res.exit_code == 0 and failed == 0 and bool(wanted) and set(wanted) <= set(ran)
    counts = {**summarize_pytest(res.output), "passed": len([n for n in ran if n]), "failed": failed}
    return ok, {**counts, "exit_code": res.exit_code, "timed_out": res.timed_out, "output": res.output[-2000:]}


def test_functions(test: str) -> list[str]:
    """The test_* functions a hidden test file defines at its top level."""
    return [n.name for n in ast.parse(test).body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


# -- SWE-bench rows ----------------------------------------------------------------------------


def write_test_files(workspace: Path, files: dict[str, str | None]) -> None:
    """Write (None: delete) each file over the workspace. Paths are confined as the file tools confine
    the model's, so a symlink the agent planted cannot carry a write outside; files are replaced, never
    written in place."""
    for rel, text in files.items():
        real = confine(workspace, rel)
        if text is None and not real.parent.is_dir():
            continue
        dfd = dir_beneath(workspace, real.parent, create=text is not None)
        try:
            if text is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(real.name, dir_fd=dfd)
            else:
                replace_file(real, text, parent_fd=dfd)
        finally:
            os.close(dfd)


# What pytest reads besides the tests themselves: a copy the agent adds or edits could skip,
# deselect or forge every test. The check takes each from the task's snapshot (or removes it), as it
# takes the tests. A `pytest.py` at the root would stand in for pytest itself.
TEST_CONFIG = {"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "pytest.py"}

# Runs pytest for the swe check: pytest is imported before /workspace is on sys.path (python -P), and
# the verdict is this plugin's, stamped with a nonce read (and deleted) before any workspace code runs.
SWE_RUNNER = """\
import json
import os
import sys

import pytest


class Verdict:
    def __init__(self, nonce):
        self.nonce, self.outcome = nonce, {{}}

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.outcome[report.nodeid] = "failed"
        elif report.when == "call" and report.passed:
            self.outcome.setdefault(report.nodeid, "passed")

    def pytest_unconfigure(self, config):  # the very last hook: no summary can push it out of the kept output
        passed = sorted(n for n, o in self.outcome.items() if o == "passed")
        print("\\nHARNESSRL-VERDICT", self.nonce, json.dumps(passed), flush=True)


with open("/tmp/check/nonce") as f:
    verdict = Verdict(f.read())
os.unlink("/tmp/check/nonce")
sys.path.insert(0, "/workspace")
raise SystemExit(pytest.main({args!r}, plugins=[verdict]))
"""
_SWE_VERDICT = re.compile(r"^HARNESSRL-VERDICT (\S+) (\[.*\])$", re.MULTILINE)


def _tree(root: Path) -> tuple[dict[str, Path], list[str]]:
    """(every regular file under root by its relative path, every symlink's relative path); links are
    never followed."""
    files, links = {}, []
    for d, dirs, names in os.walk(root):
        for x in [*dirs, *names]:
            full = os.path.join(d, x)
            if os.path.islink(full):
                links.append(os.path.relpath(full, root))
            elif x in names and os.path.isfile(full):
                files[os.path.relpath(full, root)] = Path(full)
        dirs[:] = [x for x in dirs if not os.path.islink(os.path.join(d, x))]
    return files, links


def _is_test_file(rel: str) -> bool:
    name = os.path.basename(rel)
    return name.startswith("test_") or name.endswith("_test.py") or name in ("__init__.py", "conftest.py")


def task_test_files(workspace: Path, snapshot: Path, check: Check) -> dict[str, str | None]:
    """What the swe check writes over the workspace before running pytest: the task's own tests and
    test config, never the agent's. Restored from the snapshot, or removed where the snapshot has
    none: every file pytest reads as config (TEST_CONFIG), anywhere; every file under a test folder
    (one that holds a listed test file and has "test" in its path); the test files (test_*.py,
    *_test.py, __init__.py) beside a listed test file in any other folder. Then the row's test_patch
    files. Raises ValueError where the workspace links (symlinks) any of these paths: a link could
    carry a forged conftest.py or a stub module in, and no restore could see through it."""
    named = {i.split("::")[0] for i in check.test_ids}
    dirs = {str(Path(n).parent) for n in named} - {"."}
    whole = {d for d in dirs if "test" in d}

    def protected(rel: str) -> bool:
        folder = os.path.dirname(rel)
        return (rel in named or os.path.basename(rel) in TEST_CONFIG or any(rel.startswith(d + "/") for d in whole)
                or (folder in dirs and _is_test_file(rel)))  # fmt: skip

    theirs, links = _tree(workspace)
    linked = [rel for rel in links if protected(rel) or rel in dirs or any(d.startswith(rel + "/") for d in dirs)]
    if linked:
        raise ValueError(f"the workspace links test files or test config: {', '.join(sorted(linked)[:3])}")
    ours, _ = _tree(snapshot)
    files: dict[str, str | None] = {}
    for rel in sorted(set(theirs) | set(ours)):
        if not protected(rel):
            continue
        try:
            files[rel] = ours[rel].read_bytes().decode("utf-8") if rel in ours else None  # CRLF kept
        except UnicodeDecodeError:
            continue  # a binary fixture: left as the workspace has it (docs/data.md)
    return {**files, **check.test_files}


def run_swe_check(
    workspace: Path, check: Check, python: str = PYTHON, snapshot: Path | None = None
) -> tuple[bool, dict[str, Any]]:
    """Write the task's tests and test config over the workspace (task_test_files; with no
    `snapshot`, the row's test_patch files only), run the files of FAIL_TO_PASS + PASS_TO_PASS with
    pytest in the sandbox (`python`: the harness's own, or the task's environment's; from
    /workspace, plugins not autoloaded as in run_tests); success is every listed id passing, by the
    runner's own verdict. The workspace is changed: run it on an episode's copy, never a snapshot."""
    write_test_files(workspace, task_test_files(workspace, snapshot, check) if snapshot else check.test_files)
    # Whole files, not node ids: pytest stops at a node id it cannot collect (a test file importing
    # what the fix adds), which would fail every PASS_TO_PASS id with it; a missing file, likewise.
    paths = [f for f in dict.fromkeys(i.split("::")[0] for i in check.test_ids) if (workspace / f).exists()]
    args = ["-p", "no:cacheprovider", "-q", "--tb=short", "--color=no", "--continue-on-collection-errors"]
    nonce = secrets.token_hex(16)
    files = {"nonce": nonce, "run_swe.py": SWE_RUNNER.format(args=[*args, "--", *paths])}
    command = python_command(files, ["/tmp/check/run_swe.py"], python, cwd=SANDBOX_ROOT)
    command = f"export PYTHONDONTWRITEBYTECODE=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 && {command}"
    res = check_sandbox(workspace, check.timeout_s, python).run(command)
    verdicts = [json.loads(v) for n, v in _SWE_VERDICT.findall(res.output) if n == nonce]
    passed = set(verdicts[-1]) if verdicts else set()
    f2p = sum(i in passed for i in check.fail_to_pass)
    p2p = sum(i in passed for i in check.pass_to_pass)
    ok = not res.timed_out and f2p == len(check.fail_to_pass) and p2p == len(check.pass_to_pass)
    return ok, {
        "fail_to_pass": {"passed": f2p, "total": len(check.fail_to_pass)},
        "pass_to_pass": {"passed": p2p, "total": len(check.pass_to_pass)},
        "passed_ids": sorted(passed),
        **summarize_pytest(res.output),
        "exit_code": res.exit_code,
        "timed_out": res.timed_out,
        "output": res.output[-2000:],
    }


# -- answers -----------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_PATH = re.compile(r"[\w./-]+\.py\b")


def _clean(s: str) -> str:
    s = s.strip().strip("`'\" ").rstrip(".").strip("`'\" ")
    return s.removeprefix(SANDBOX_ROOT + "/").removeprefix("./")


def answer_matches(expected: str, answer: str | None) -> bool:
    """The answer is the expected value, alone or as the one number (or .py path) in a sentence; for
    several numbers ("375 17 42"), exactly those numbers in that order. Extra candidates ("123 or
    456") never pass: hedging is not an answer."""
    if answer is None:
        return False
    if _clean(answer) == expected:
        return True
    if " " in expected and all(_NUMBER.fullmatch(x) for x in expected.split()):
        found = _NUMBER.findall(answer)
        return len(found) == len(expected.split()) and all(
            float(a) == float(b) for a, b in zip(found, expected.split(), strict=True)
        )
    if _NUMBER.fullmatch(expected):
        found = _NUMBER.findall(answer)
        return len(found) == 1 and float(found[0]) == float(expected)
    if expected.endswith(".py"):
        found = {_clean(p) for p in _PATH.findall(answer)}
        return found == {expected}
    return False


def make_checker(task: Task, python: str = PYTHON, snapshot: Path | None = None) -> Checker:
    """The task's checker, for run_episode(checker=...): (workspace, final_answer) -> (success, details).
    Code checks run with `python`: the task's environment's interpreter (harnessrl/sources/envs.py), if any.
    `snapshot` (the task's repo, untouched) is where a swe check takes the tests and test config from."""
    check = task.check
    if check.kind == "answer":
        expected = check.answer or ""

        def check_answer(workspace: Path, answer: str | None) -> tuple[bool, dict[str, Any]]:
            return answer_matches(expected, answer), {"expected": expected, "answer": answer}

        return check_answer

    if check.kind == "swe":
        return lambda workspace, answer: run_swe_check(workspace, check, python, snapshot)

    def check_tests(workspace: Path, answer: str | None) -> tuple[bool, dict[str, Any]]:
        return run_check(workspace, check.test or "", check.packages, check.timeout_s, python)

    return check_tests
