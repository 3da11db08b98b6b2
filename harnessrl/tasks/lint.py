"""The lint suite: a ruff violation planted in working code; fix it without changing what the code does.

From a repository (a real source's copy, or a generated repo), for a module that ruff finds clean:
  - unused_import: `import <module>` of a standard-library module the file never names (F401);
  - undefined_name: one use of a function's parameter misspelt into a name nothing defines (F821).
The hidden check runs ruff on the file with just those rules (`--isolated`: no ruff settings the
agent writes apply; `--ignore-noqa`: no suppression comment does), requires the file's syntax tree to
be the original's (so the only change the fix may make is undoing the planted one: deleting the line,
the function or the file fails), imports the module, and asserts every answer its functions gave
when probed before the change.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

from harnessrl.harness.tools.terminal import PYTHON
from harnessrl.tasks.bugfix import top_level_names, unique_context
from harnessrl.tasks.mutations import Mutation
from harnessrl.tasks.probe import assertions, module_of, probe_functions, repo_functions
from harnessrl.tasks.repogen import planted_tasks
from harnessrl.tasks.task import Check, Solution, Task

SUITE = "lint"
TOOLS = ["lint", "read_file", "edit_file", "finish"]
RULES = "F401,F821"
PER_FILE = 4  # plantings a file may get, alternating the kinds
# Standard-library modules an unused import names; one the file never mentions is picked.
UNUSED = ["textwrap", "fractions", "decimal", "statistics", "bisect", "heapq", "colorsys", "calendar", "shlex"]

CHECK = """\
import ast
import hashlib
import importlib
import os
import subprocess
import sys


def test_lint_clean():  # the harness's ruff: a source's environment has none
    python = os.environ.get("HARNESSRL_PYTHON", sys.executable)
    r = subprocess.run([python, "-m", "ruff", "check", "--no-cache", "--isolated", "--ignore-noqa", "--select",
                        {rules!r}, "/workspace/{path}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_only_the_planted_change_undone():  # the code is the original's, whatever its layout
    with open("/workspace/{path}") as f:
        tree = ast.dump(ast.parse(f.read()))
    assert hashlib.sha256(tree.encode()).hexdigest() == {digest!r}


def test_module_imports():
    importlib.import_module({module!r})
"""


def violations(root: Path, target: str = ".") -> list[dict]:
    """What ruff reports for the suite's rules under `target` (relative to `root`), as the check runs it:
    no settings of the repository's, no noqa comment honoured."""
    cmd = [PYTHON, "-m", "ruff", "check", "--no-cache", "--isolated", "--ignore-noqa", "--select", RULES]
    cmd += ["--output-format", "json", target]
    res = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
    return json.loads(res.stdout or "[]")


def dirty_files(root: Path) -> set[str]:
    """Files ruff already flags for the suite's rules: a task planted there would have two answers."""
    return {Path(v["filename"]).resolve().relative_to(root.resolve()).as_posix() for v in violations(root)}


def unused_import(rng: random.Random, text: str) -> tuple[str, Mutation] | None:
    """The file with an unused import added after its last top-level import (or its docstring)."""
    tree = ast.parse(text)
    free = [m for m in UNUSED if not re.search(rf"\b{m}\b", text)]
    if not free:
        return None
    module = rng.choice(free)
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    after = imports[-1].end_lineno if imports else 0
    if (
        not imports
        and tree.body
        and isinstance(tree.body[0], ast.Expr)
        and isinstance(tree.body[0].value, ast.Constant)
    ):
        after = tree.body[0].end_lineno  # after the module docstring
    lines = text.splitlines(keepends=True)
    mutated = "".join([*lines[:after], f"import {module}\n", *lines[after:]])
    return mutated, Mutation(after + 1, 0, "", f"import {module}", "unused_import")


def undefined_name(rng: random.Random, text: str) -> tuple[str, Mutation] | None:
    """The file with one use of a function parameter misspelt (a letter dropped) into an undefined name."""
    tree = ast.parse(text)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in [*n.args, *n.kwonlyargs]
    }
    sites = []
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        params = {a.arg for a in fn.args.args + fn.args.kwonlyargs if len(a.arg) >= 4}
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in params:
                sites.append(node)
    rng.shuffle(sites)
    lines = text.splitlines(keepends=True)
    for node in sites:
        i = rng.randrange(1, len(node.id))
        typo = node.id[:i] + node.id[i + 1 :]
        line = lines[node.lineno - 1]
        if typo in names or not typo.isidentifier() or line[node.col_offset : node.end_col_offset] != node.id:
            continue
        lines[node.lineno - 1] = line[: node.col_offset] + typo + line[node.end_col_offset :]
        return "".join(lines), Mutation(node.lineno, node.col_offset, node.id, typo, "undefined_name")
    return None


def _old_new(original: str, mutated: str, m: Mutation) -> tuple[str, str]:
    """(old, new) for the expert's edit_file: the smallest run of whole lines around the change that is
    unique in the mutated file; for an added import, the import line and its newline."""
    if m.kind == "unused_import":
        return f"{m.new}\n", ""
    return unique_context(original, m, mutated)


def repo_tasks(
    rng: random.Random, out: Path, root: Path, split: str, prefix: str, want: int, python: str = PYTHON
) -> list[Task]:
    """Up to `want` candidate tasks, alternating the two kinds, each in its own snapshot
    out/repos/<split>/<prefix>-<n> (hardlinked to the source copy, but for the changed file). Probes
    run with `python` (the source's environment's, where it has one)."""
    packages = top_level_names(root)
    dirty = dirty_files(root)
    paths = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py"))
    paths = [p for p in paths if p not in dirty and not p.endswith("__init__.py") and "/tests/" not in f"/{p}"]
    rng.shuffle(paths)
    rows = probe_functions(root, packages, repo_functions(root), rng, n=4, python=python) if paths else {}
    tasks: list[Task] = []
    seen: set[tuple[str, str]] = set()
    for path in paths * PER_FILE:  # each file in turn, then again with another planting
        if len(tasks) == want:
            break
        original = (root / path).read_text()
        plant = [unused_import, undefined_name][len(tasks) % 2]
        try:
            found = plant(rng, original) or (undefined_name if plant is unused_import else unused_import)(rng, original)
        except (SyntaxError, ValueError):
            continue
        if found is None:
            continue
        mutated, m = found
        if (path, mutated) in seen:
            continue
        seen.add((path, mutated))
        tid = f"{prefix}-{len(tasks)}"
        rel = f"repos/{split}/{tid}"
        shutil.copytree(root, out / rel, copy_function=os.link)
        (out / rel / path).unlink()  # a hardlink: write a new file, never into the shared one
        (out / rel / path).write_text(mutated)
        module = module_of(path)
        digest = hashlib.sha256(ast.dump(ast.parse(original)).encode()).hexdigest()
        test = CHECK.format(rules=RULES, path=path, module=module, digest=digest)
        probed = rows.get(module, [])
        if probed:
            test += (
                f"\n\ndef test_behaviour():\n    m = importlib.import_module({module!r})\n"
                + "\n".join(assertions("m.", probed))
                + "\n"
            )
        old, new = _old_new(original, mutated, m)
        tasks.append(
            Task(
                id=f"{SUITE}/{split}/{tid}",
                suite=SUITE,
                split=split,  # type: ignore[arg-type]
                repo=rel,
                instruction=f"`ruff check --select {RULES} {path}` reports a problem. Fix it without changing what the code "
                "does.",
                tools=TOOLS,
                check=Check(kind="tests", test=test, packages=packages),
                solution=Solution(kind=m.kind, path=path, old=old, new=new),
            )
        )
    return tasks


def build(out: Path, seed: int, num: int) -> list[Task]:
    """From generated repos, up to two tasks each, a quarter held out by repo. (Real code: mine.py.)"""
    rng = random.Random(f"{SUITE}-{seed}")  # suites built with one seed still differ
    plant = lambda original, repo, split, prefix, want: repo_tasks(rng, out, original, split, prefix, want)
    return planted_tasks(rng, out, num, plant)
