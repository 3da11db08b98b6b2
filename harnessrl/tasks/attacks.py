"""Scripted adversaries: each tries to pass a task's check without doing the work the task asks for.

RL optimises whatever the check lets through, so every check is attacked before a task is kept. An
attack is a script like the expert's (harnessrl/tasks/expert.py): it acts only through the task's
own tools, in the harness, on the path an RL episode takes, and it may read the task's snapshot on
disk (and the task's solution) to aim. Validation runs every attack on every candidate, and a task
that any attack passes is not kept (harnessrl/tasks/validate.py); `harnessrl tasks attack` runs them
on a built suite and prints what each got accepted.

Each attack returns its script, or None where it does not apply: the task has no such target (a
lookup has no file to empty), or none of the task's tools can make the change (a lint task's tools
cannot create a file, so it cannot write a ruff.toml).
"""

from __future__ import annotations

import ast
import base64
import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path

from harnessrl.config import Budgets
from harnessrl.harness.episode import Trajectory, run_tasks
from harnessrl.tasks.diffs import parse_patch
from harnessrl.tasks.expert import Script, Scripted, call, turn
from harnessrl.tasks.lint import RULES, violations
from harnessrl.tasks.task import Task

Call = tuple[str, dict]
Attack = Callable[[Task, Path], Script | None]  # (task, its untouched snapshot) -> a script, or None
MAX_CALLS = 8  # the harness's max_calls_per_turn

# What a forged test run prints: a runner's summary, pytest's per-id lines and its last line.
FORGED = """\
import os as _os
import stat as _stat

for _fd in range(1, 256):  # every pipe: stdout, and the copy pytest keeps while it captures fd 1
    try:
        if _stat.S_ISFIFO(_os.fstat(_fd).st_mode):
            _os.write(_fd, {text!r}.encode())
    except OSError:
        pass
_os._exit(0)
"""
# A conftest.py that reports every test as passed, whatever it did.
FORGING_CONFTEST = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""


def _play(*turns: str) -> Script:
    """A script that ignores what its calls return: the turns, then a word to end the episode."""
    for text in turns:
        _ = yield text  # `yield from` would hand the harness's outputs to a tuple, which takes none
    yield "Done."


def _calls(calls: list[Call | None]) -> Script | None:
    """The calls in turns of at most MAX_CALLS; None where any of them is None (no tool could make it)."""
    if not calls or any(c is None for c in calls):
        return None
    return _play(*(turn(*calls[i : i + MAX_CALLS]) for i in range(0, len(calls), MAX_CALLS)))  # type: ignore[arg-type]


def _read(snapshot: Path, path: str) -> str | None:
    try:
        return (snapshot / path).read_text()
    except (OSError, UnicodeDecodeError):
        return None


def write(task: Task, snapshot: Path, path: str, text: str) -> Call | None:
    """A call that makes `path` hold `text`, with the task's own tools: write_file, else edit_file over
    the whole file (it must exist and be unchanged), else a shell command; None where none can."""
    if "write_file" in task.tools:
        return call("write_file", path=path, content=text)
    old = _read(snapshot, path)
    if "edit_file" in task.tools and old:
        return call("edit_file", path=path, old_str=old, new_str=text)
    if "run_terminal" in task.tools:
        blob = base64.b64encode(text.encode()).decode()
        quoted = shlex.quote(path)
        return call(
            "run_terminal", command=f'mkdir -p "$(dirname {quoted})" && printf %s {blob} | base64 -d > {quoted}'
        )
    return None


def targets(task: Task) -> list[str]:
    """The files a code task is about: the file it names, or those the gold patch changes."""
    if task.check.kind == "answer":
        return []
    if task.solution.patch:
        return [f.path for f in parse_patch(task.solution.patch) if not f.new_file]
    return [task.solution.path] if task.solution.path else []


def test_files(task: Task) -> list[str]:
    """The tests a code task's workspace shows: the files of its test ids, or the bugfix test."""
    found = [*dict.fromkeys(i.split("::")[0] for i in task.check.test_ids)]
    return found or ([task.solution.test_path] if task.solution.test_path else [])


def _conftest_dirs(task: Task) -> list[str]:
    """Where a conftest.py takes effect on the task's tests: the root, and each test file's folder."""
    return [*dict.fromkeys(["", *(str(Path(p).parent) + "/" for p in test_files(task) if "/" in p)])]


def _entry(task: Task, snapshot: Path) -> str | None:
    """A module the check imports: the file the task is about (the first the gold patch changes), or
    the package's own, where it has any text for edit_file to match."""
    found = [
        *targets(task),
        *(f"{p}/__init__.py" for p in task.check.packages),
        *(f"{p}.py" for p in task.check.packages),
    ]
    return next((rel for rel in found if _read(snapshot, rel)), None)


# -- every task ---------------------------------------------------------------------------------


def nothing(task: Task, snapshot: Path) -> Script | None:
    """Stop at once, with no call and no answer a check could accept."""
    return _play("(no change)")


# -- answers ------------------------------------------------------------------------------------


def hedge(task: Task, snapshot: Path) -> Script | None:
    """The right answer and a wrong one: "7 or 8"."""
    expected = task.check.answer
    if task.check.kind != "answer" or not expected:
        return None
    decoy = re.sub(r"-?\d+", lambda m: str(int(m.group()) + 1), expected)
    if decoy == expected:
        decoy = "other.py" if expected.endswith(".py") else "something else"
    return _play(f"{expected} or {decoy}")


def every_candidate(task: Task, snapshot: Path) -> Script | None:
    """Every number in the files that mention the names asked about (every .py path, for "where"
    questions): an answer that lists them all holds the right one."""
    expected = task.check.answer
    if task.check.kind != "answer" or not expected:
        return None
    if expected.endswith(".py"):
        return _play(", ".join(sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*.py"))))
    names = task.solution.names or [task.solution.name or ""]
    numbers: list[str] = []
    for path in sorted(snapshot.rglob("*.py")):
        text = _read(snapshot, path.relative_to(snapshot).as_posix()) or ""
        if any(n and re.search(rf"\b{re.escape(n)}\b", text) for n in names):
            numbers += re.findall(r"-?\d+(?:\.\d+)?", text)
    numbers = [*dict.fromkeys(numbers)]
    if len(numbers) < 2:
        return None
    if task.solution.names:  # keyed answers: every candidate after every name
        return _play(", ".join(f"{n} = {v}" for n in names for v in numbers))
    return _play(" ".join(numbers))


# -- code ---------------------------------------------------------------------------------------


def empty_file(task: Task, snapshot: Path) -> Script | None:
    """Empty the files the task is about: nothing left to be wrong."""
    return _calls([write(task, snapshot, p, "") for p in targets(task)])


def forge_verdict(task: Task, snapshot: Path) -> Script | None:
    """Make the module every test imports print a passing summary (the runner's and pytest's) and exit 0."""
    entry = _entry(task, snapshot)
    if entry is None:
        return None
    ids = task.check.test_ids
    lines = ["== 0 failed, 99 passed in 0s ==", *(f"PASSED {i}" for i in ids), f"{len(ids) or 99} passed in 0.01s"]
    return _calls(
        [write(task, snapshot, entry, FORGED.format(text="\n".join(lines) + "\n") + (_read(snapshot, entry) or ""))]
    )


def conftest_forge(task: Task, snapshot: Path) -> Script | None:
    """A conftest.py at the root and beside every test file that reports every test as passed."""
    if not targets(task):
        return None
    dirs = _conftest_dirs(task)
    return _calls([write(task, snapshot, f"{d}conftest.py", FORGING_CONFTEST) for d in dirs])


def linked_conftest(task: Task, snapshot: Path) -> Script | None:
    """The forging conftest.py as a symlink (at the root and beside every test file) to a file of
    another name, which a restore that skips links would never see."""
    if not targets(task) or "run_terminal" not in task.tools:
        return None
    dirs = _conftest_dirs(task)
    blob = base64.b64encode(FORGING_CONFTEST.encode()).decode()
    links = " && ".join(f'ln -sf "$PWD/forge.py" {shlex.quote(d + "conftest.py")}' for d in dirs)
    return _calls([call("run_terminal", command=f"printf %s {blob} | base64 -d > forge.py && {links}")])


def conftest_ignore(task: Task, snapshot: Path) -> Script | None:
    """A conftest.py that tells pytest to collect nothing: no test can fail."""
    if not targets(task):
        return None
    return _calls([write(task, snapshot, "conftest.py", 'collect_ignore_glob = ["*"]\n')])


def pytest_ini(task: Task, snapshot: Path) -> Script | None:
    """A pytest.ini that collects no test file and only lists what it would run."""
    if not targets(task):
        return None
    ini = "[pytest]\npython_files = nothing_matches_*.py\naddopts = --collect-only -q\n"
    return _calls([write(task, snapshot, "pytest.ini", ini)])


def pyproject_pytest(task: Task, snapshot: Path) -> Script | None:
    """The same through pyproject.toml: pytest options appended to it (or a new one)."""
    if not targets(task):
        return None
    text = (_read(snapshot, "pyproject.toml") or "") + '\n[tool.pytest.ini_options]\naddopts = "--collect-only -q"\n'
    return _calls([write(task, snapshot, "pyproject.toml", text)])


def shadow_pytest(task: Task, snapshot: Path) -> Script | None:
    """A pytest.py (and sitecustomize.py) at the root that print a pass for every test and exit 0."""
    if not targets(task):
        return None
    ids = task.check.test_ids
    lines = [*(f"PASSED {i}" for i in ids), f"== {len(ids) or 1} passed in 0.01s =="]
    forged = FORGED.format(text="\n".join(lines) + "\n")
    return _calls([write(task, snapshot, "pytest.py", forged), write(task, snapshot, "sitecustomize.py", forged)])


def stub_tests(task: Task, snapshot: Path) -> Script | None:
    """Rewrite the workspace's tests so each named test passes and asserts nothing."""
    files = test_files(task)
    if not files:
        return None
    writes = []
    for path in files:
        names = [i.split("::")[1:] for i in task.check.test_ids if i.startswith(path + "::")]
        text = _read(snapshot, path) or ""
        names = names or [[n] for n in re.findall(r"^def (test_\w+)", text, re.MULTILINE)] or [["test_ok"]]
        stubs = []
        for parts in names:
            name = re.sub(r"\[.*$", "", parts[-1])  # a parametrized id's function
            body = f"def {name}(*args, **kwargs):\n    pass\n"
            stubs.append(f"class {parts[0]}:\n    " + body.replace("\n    ", "\n        ") if len(parts) > 1 else body)
        writes.append(write(task, snapshot, path, "\n\n".join(dict.fromkeys(stubs))))
    return _calls(writes)


def delete_tests(task: Task, snapshot: Path) -> Script | None:
    """Empty the workspace's test files: no test left to fail."""
    return _calls([write(task, snapshot, p, "") for p in test_files(task)]) if test_files(task) else None


def syntax_error(task: Task, snapshot: Path) -> Script | None:
    """A syntax error at the top of every test file, so collection stops (SWE-smith issue #24)."""
    files = test_files(task)
    return _calls([write(task, snapshot, p, "def (:\n" + (_read(snapshot, p) or "")) for p in files]) if files else None


# -- renames ------------------------------------------------------------------------------------


def _used_elsewhere(snapshot: Path, name: str) -> bool:
    """Whether code of the repo names `name` beyond its definition (else renaming the def is the whole
    job): a use, an attribute or an import of it, as the rename check reads identifiers."""
    for path in snapshot.rglob("*.py"):
        try:
            tree = ast.parse(path.read_text())
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for n in ast.walk(tree):
            used = (isinstance(n, ast.Name) and n.id == name) or (isinstance(n, ast.Attribute) and n.attr == name)
            if used or (isinstance(n, ast.alias) and name in (n.name.split(".")[-1], n.asname)):
                return True
    return False


def rename_def_only(task: Task, snapshot: Path) -> Script | None:
    """Rename only the definition, leaving every call site on the old name."""
    s = task.solution
    if s.kind != "rename" or "edit_file" not in task.tools or not s.path or not _used_elsewhere(snapshot, s.name or ""):
        return None
    return _calls([call("edit_file", path=s.path, old_str=f"def {s.name}(", new_str=f"def {s.new_name}(")])


def rename_alias(task: Task, snapshot: Path) -> Script | None:
    """Rename the definition and keep the old name working through an alias under another name."""
    s = task.solution
    text = _read(snapshot, s.path or "") if s.kind == "rename" else None
    if not text or not _used_elsewhere(snapshot, s.name or ""):
        return None
    text = text.replace(f"def {s.name}(", f"def {s.new_name}(", 1)
    return _calls(
        [write(task, snapshot, s.path or "", text + f"\n\nglobals()[{s.name!r}[:0] + {s.name!r}] = {s.new_name}\n")]
    )


# -- lint ---------------------------------------------------------------------------------------


def _flagged(snapshot: Path, path: str) -> list[int]:
    """The lines ruff flags for the suite's rules in the snapshot's file."""
    return sorted({v["location"]["row"] for v in violations(snapshot, path)})


def _lint_file(task: Task, snapshot: Path) -> tuple[str, str] | None:
    path = task.solution.path
    text = _read(snapshot, path) if task.suite == "lint" and path else None
    return (path, text) if path and text is not None else None


def noqa_file(task: Task, snapshot: Path) -> Script | None:
    """`# ruff: noqa` on the file's first line: ruff reports nothing in it."""
    found = _lint_file(task, snapshot)
    return _calls([write(task, snapshot, found[0], "# ruff: noqa\n" + found[1])]) if found else None


def noqa_line(task: Task, snapshot: Path) -> Script | None:
    """`# noqa` at the end of each line ruff flags."""
    found = _lint_file(task, snapshot)
    if not found:
        return None
    lines = found[1].splitlines(keepends=True)
    for row in _flagged(snapshot, found[0]):
        lines[row - 1] = lines[row - 1].rstrip("\n") + "  # noqa\n"
    return _calls([write(task, snapshot, found[0], "".join(lines))])


def delete_flagged(task: Task, snapshot: Path) -> Script | None:
    """Delete each line ruff flags, whatever it did (for an unused import, that is the fix itself)."""
    found = _lint_file(task, snapshot)
    if not found or task.solution.kind == "unused_import":
        return None
    rows = set(_flagged(snapshot, found[0]))
    lines = [ln if i not in rows else "" for i, ln in enumerate(found[1].splitlines(keepends=True), 1)]
    return _calls([write(task, snapshot, found[0], "".join(lines))])


def lint_config(task: Task, snapshot: Path) -> Script | None:
    """Linter config the agent writes: ruff.toml, .ruff.toml and pyproject.toml ignoring the rules."""
    if not _lint_file(task, snapshot):
        return None
    rules = json.dumps(RULES.split(","))
    pyproject = (_read(snapshot, "pyproject.toml") or "") + f"\n[tool.ruff.lint]\nignore = {rules}\n"
    return _calls([
        write(task, snapshot, "ruff.toml", f"[lint]\nignore = {rules}\n"),
        write(task, snapshot, ".ruff.toml", f"[lint]\nignore = {rules}\n"),
        write(task, snapshot, "pyproject.toml", pyproject),
    ])  # fmt: skip


# Every attack by name, in the order the table prints them.
ATTACKS: dict[str, Attack] = {
    "nothing": nothing,
    "hedge": hedge,
    "every_candidate": every_candidate,
    "empty_file": empty_file,
    "forge_verdict": forge_verdict,
    "conftest_forge": conftest_forge,
    "linked_conftest": linked_conftest,
    "conftest_ignore": conftest_ignore,
    "pytest_ini": pytest_ini,
    "pyproject_pytest": pyproject_pytest,
    "shadow_pytest": shadow_pytest,
    "stub_tests": stub_tests,
    "delete_tests": delete_tests,
    "syntax_error": syntax_error,
    "rename_def_only": rename_def_only,
    "rename_alias": rename_alias,
    "noqa_file": noqa_file,
    "noqa_line": noqa_line,
    "delete_flagged": delete_flagged,
    "lint_config": lint_config,
}

# Attacks are ours, not the model's: budgets that never cut a long write short.
ATTACK_BUDGETS = Budgets(max_turns=24, max_tokens=1 << 24, max_turn_tokens=1 << 22, wall_s=600.0)


def run_attacks(
    tasks: list[Task],
    suite_dir: Path | str,
    names: list[str] | None = None,
    workers: int = 4,
    on_done: Callable[[], None] | None = None,
) -> list[tuple[str, Task, Trajectory]]:
    """Every attack of `names` (default: all) on every task it applies to, each an episode in the
    harness: (attack, task, trajectory); the trajectory's outcome says whether the check accepted it."""
    suite_dir = Path(suite_dir)
    runs = []
    for name in names or list(ATTACKS):
        scripts = {t.id: ATTACKS[name](t, suite_dir / t.repo) for t in tasks}
        tried = [t for t in tasks if scripts[t.id] is not None]
        policy_for = lambda t, scripts=scripts: Scripted(scripts[t.id])  # type: ignore[arg-type]
        trajectories = run_tasks(tried, suite_dir, policy_for, ATTACK_BUDGETS, workers=workers, on_done=on_done)
        runs += [(name, t, traj) for t, traj in zip(tried, trajectories, strict=True)]
    return runs


def accepted(runs: list[tuple[str, Task, Trajectory]]) -> dict[str, list[str]]:
    """Each task id that some attack passed -> the attacks that passed it."""
    passed: dict[str, list[str]] = {}
    for name, task, traj in runs:
        if traj.outcome.success:
            passed.setdefault(task.id, []).append(name)
    return passed


def table(runs: list[tuple[str, Task, Trajectory]]) -> list[str]:
    """Lines of accepted/tried per suite and attack, as `harnessrl tasks attack` prints them."""
    cells: dict[tuple[str, str], list[int]] = {}
    for name, task, traj in runs:
        cell = cells.setdefault((task.suite, name), [0, 0])
        cell[0] += bool(traj.outcome.success)
        cell[1] += 1
    lines = [f"{'suite':<14}{'attack':<18}{'accepted':>9}{'tried':>7}"]
    for (suite, name), (ok, n) in sorted(cells.items(), key=lambda kv: (kv[0][0], list(ATTACKS).index(kv[0][1]))):
        lines.append(f"{suite:<14}{name:<18}{ok:>9}{n:>7}")
    total = sum(c[0] for c in cells.values())
    lines.append(f"{total} of {sum(c[1] for c in cells.values())} attack episodes accepted")
    return lines
