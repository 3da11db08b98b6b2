"""The bugfix suite: a one-token bug planted in working code, and a test that catches it.

From a repo (generated, or a real source's copy: harnessrl/tasks/mine.py):
  1. probe its functions in the sandbox; the original's plain answers become test assertions;
  2. for a function, try single-token mutations (operator swap, integer +1) until one changes some
     probed answer without hanging;
  3. write the task's snapshot: the repo with the mutant, plus tests/test_<function>.py asserting a
     few answers, at least one of which the mutant gets wrong;
  4. the hidden check asserts every probed answer of the module (the visible ones included), so a
     fix must restore the function, not special-case the visible asserts;
  5. keep the task only if the check passes on the original and fails on the mutant, both run in
     the sandbox exactly as an episode's checker will run them.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from harnessrl.harness.sandbox import PYTHON
from harnessrl.tasks.checkers import run_check
from harnessrl.tasks.mutations import Mutation, apply, mutation_sites
from harnessrl.tasks.probe import Function, assertions, probe, probe_functions, repo_functions, returns
from harnessrl.tasks.repogen import Repo, planted_tasks
from harnessrl.tasks.task import Check, Solution, Task

SUITE = "bugfix"
TOOLS = ["read_file", "grep", "edit_file", "run_tests", "finish"]
TRIES_PER_FUNCTION = 6

Rows = list[tuple[str, str, str]]  # (function, args, repr of the answer)


def top_level_names(repo_dir: Path) -> list[str]:
    names = [p.stem for p in repo_dir.glob("*.py")]
    names += [d.name for d in repo_dir.iterdir() if d.is_dir() and (d / "__init__.py").exists()]
    return sorted(n for n in names if n.isidentifier() and n != "tests")


def _test_file(fn: Function, rows: Rows) -> str:
    return (
        f"from {fn.module} import {fn.name}\n\n\ndef test_{fn.name.lstrip('_')}():\n"
        + "\n".join(assertions("", rows))
        + "\n"
    )


def _hidden_test(fn: Function, rows: Rows) -> str:
    return f"import {fn.module} as m\n\n\ndef test_module():\n" + "\n".join(assertions("m.", rows)) + "\n"


def unique_context(source: str, m: Mutation, mutated: str) -> tuple[str, str]:
    """(old, new): the smallest block of whole lines around the mutation that is unique in the mutated
    file, as an edit_file old_str (mutated) and new_str (original)."""
    orig_lines, mut_lines = source.splitlines(), mutated.splitlines()
    lo = hi = m.line - 1
    while True:
        old = "\n".join(mut_lines[lo : hi + 1])
        if mutated.count(old) == 1 or (lo == 0 and hi == len(mut_lines) - 1):
            return old, "\n".join(orig_lines[lo : hi + 1])
        lo, hi = max(lo - 1, 0), min(hi + 1, len(mut_lines) - 1)


def mutate_function(
    rng: random.Random,
    repo_dir: Path,
    work: Path,
    packages: list[str],
    fn: Function,
    module_rows: Rows,
    python: str = PYTHON,
) -> tuple[str, Mutation, Rows] | None:
    """(mutated source, mutation, the visible rows) for the first mutation that changes an answer."""
    source = (repo_dir / fn.path).read_text()
    sites = mutation_sites(source, fn.lines)
    rng.shuffle(sites)
    mine = [r for r in module_rows if r[0] == fn.name]
    calls = {fn.module: [(f, a) for f, a, _ in mine]}
    for m in sites[:TRIES_PER_FUNCTION]:
        mutated = apply(source, m)
        if mutated is None:
            continue
        (work / fn.path).write_text(mutated)
        result = probe(work, packages, calls, python=python)[fn.module]
        if any("timeout" in r for r in result.get("calls", [])) or "error" in result:
            continue
        got = dict(((f, a), r) for f, a, r in returns(result, calls[fn.module]))
        wrong = [row for row in mine if got.get(row[:2]) != row[2]]
        if wrong:
            right = [row for row in mine if row not in wrong]
            return mutated, m, wrong[:2] + right[:2]
    (work / fn.path).write_text(source)
    return None


def repo_tasks(
    rng: random.Random,
    out: Path,
    repo_dir: Path,
    packages: list[str],
    functions: list[Function],
    split: str,
    prefix: str,
    want: int,
    per_function: int = 1,
    python: str = PYTHON,
) -> list[Task]:
    """Up to `want` verified tasks mutating these functions of the repo, up to `per_function` bugs
    each (a real module has few functions a probe can call); snapshots go to out/repos/<split>/<id>.
    Probes and checks run with `python` (the source's environment's, where it has one)."""
    rows = probe_functions(repo_dir, packages, functions, rng, python=python)
    candidates = [f for f in functions if len([r for r in rows.get(f.module, []) if r[0] == f.name]) >= 2]
    rng.shuffle(candidates)
    work = out / f".work-{prefix}"  # its own: sources mined at once share `out`
    tasks: list[Task] = []
    planted: set[tuple[str, int, int]] = set()
    for fn in candidates * per_function:
        if len(tasks) == want:
            break
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(repo_dir, work)
        found = mutate_function(rng, repo_dir, work, packages, fn, rows[fn.module], python)
        if found is None or (fn.path, found[1].line, found[1].col) in planted:
            continue
        mutated, m, visible = found
        planted.add((fn.path, m.line, m.col))
        test_path = f"tests/test_{fn.name.lstrip('_')}.py"
        (work / test_path).parent.mkdir(exist_ok=True)
        (work / test_path).write_text(_test_file(fn, visible))
        check = Check(kind="tests", test=_hidden_test(fn, rows[fn.module]), packages=packages)
        ok_original, _ = run_check(repo_dir, check.test or "", packages, python=python)
        ok_mutant, _ = run_check(work, check.test or "", packages, python=python)
        if not ok_original or ok_mutant:
            continue
        tid = f"{prefix}-{len(tasks)}"
        rel = f"repos/{split}/{tid}"
        shutil.move(work, out / rel)
        old, new = unique_context((repo_dir / fn.path).read_text(), m, mutated)
        tasks.append(
            Task(
                id=f"{SUITE}/{split}/{tid}",
                suite=SUITE,
                split=split,
                repo=rel,  # type: ignore[arg-type]
                instruction=f"The test {test_path} fails. Find the bug and fix it; do not change the test.",
                tools=TOOLS,
                check=check,
                solution=Solution(kind=m.kind, path=fn.path, old=old, new=new, test_path=test_path, name=fn.name),
            )
        )
    shutil.rmtree(work, ignore_errors=True)
    return tasks


def build(out: Path, seed: int, num: int) -> list[Task]:
    """From generated repos, two tasks each, a quarter held out by repo. (Real code: harnessrl/tasks/mine.py.)"""
    rng = random.Random(f"{SUITE}-{seed}")  # suites built with one seed still differ

    def plant(original: Path, repo: Repo, split: str, prefix: str, want: int) -> list[Task]:
        return repo_tasks(rng, out, original, [repo.package], repo_functions(original), split, prefix, want)

    return planted_tasks(rng, out, num, plant)
