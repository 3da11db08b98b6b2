"""Tasks mined from a real repository: the suites that generated repos get, on code people wrote.

`mine_sources` copies each source in (harnessrl/sources/copies.py), builds its environment, and keeps
what `mine` makes of it that validates. `mine` reads a source's copy and makes up to `wants[suite]`
candidate tasks of each suite:

- lookup: where is class/function X defined, or what is the value of constant X, for module-level
  symbols the AST finds defined exactly once, whose definition line the expert's search pattern
  finds exactly once in the whole repository (so there is one right answer);
- multi_lookup: the values of two or three of the numeric ones in one question, answered keyed;
- long_horizon: the values of three numeric constants, one search each;
- edit: rename a function everywhere, change an integer constant, or add a parameter to a function
  that answers ints (harnessrl/tasks/edit.py's checks: every module still imports, the change holds,
  every probed answer still holds);
- lint: a ruff violation planted in a module (harnessrl/tasks/lint.py);
- bugfix: a one-token bug planted in a function (harnessrl/tasks/bugfix.py).

Candidates are not yet tasks: harnessrl/tasks/validate.py keeps those whose check passes on the
expert's solution and fails on the untouched snapshot, as an episode runs them.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import multiprocessing
import random
import re
import tempfile
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from harnessrl.config import SourceConfig, StoreConfig
from harnessrl.harness.episode import Trajectory
from harnessrl.harness.sandbox import PYTHON
from harnessrl.sources.copies import SourceError, SourceInfo, copy_source
from harnessrl.sources.envs import EnvError, build_env, env_python
from harnessrl.tasks import bugfix, edit, lint, long_horizon, lookup, multi_lookup
from harnessrl.tasks.bugfix import top_level_names
from harnessrl.tasks.probe import module_of, probe_functions, repo_functions
from harnessrl.tasks.repogen import Repo, Symbol
from harnessrl.tasks.task import SPLITS, Task
from harnessrl.tasks.validate import mining_stats, reasons, validate

# A constant whose value a lookup may ask for: a number, or a short one-line string.
MAX_STRING_ANSWER = 40


def _literal(node: ast.expr) -> int | float | str | None:
    """The value of a plain literal (a negative number included), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal(node.operand)
        return -inner if isinstance(inner, int | float) and not isinstance(inner, bool) else None
    if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
        value = node.value
        if isinstance(value, int | float):
            return value
        if isinstance(value, str) and 0 < len(value) <= MAX_STRING_ANSWER and "\n" not in value:
            return value
    return None


def _definitions(path: str, tree: ast.Module) -> list[Symbol]:
    """Module-level constants (UPPER_CASE = literal), functions and classes of one file."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            value = _literal(node.value)
            if value is not None and name.isupper() and node.lineno == node.end_lineno:
                found.append(Symbol("const", name, path, node.lineno, value))  # type: ignore[arg-type]
        elif isinstance(node, ast.FunctionDef) and not node.name.startswith("__"):
            found.append(Symbol("function", node.name, path, node.lineno))
        elif isinstance(node, ast.ClassDef):
            found.append(Symbol("class", node.name, path, node.lineno))
    return found


# The expert's search for a symbol's definition (harnessrl/tasks/expert.py: lookup, values).
PATTERNS = {"const": "^{} =", "function": "^def {}\\(", "class": "^class {}\\b"}


def read_repo(root: Path) -> Repo:
    """A real repository as the generated suites see one: its files, and the symbols a question can
    have exactly one answer about. Files that do not parse are skipped."""
    files, symbols = {}, []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        try:
            text = p.read_text()
            tree = ast.parse(text)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        files[rel] = text
        symbols += _definitions(rel, tree)
    defined = Counter(s.name for s in symbols)
    lines = [line for text in files.values() for line in text.splitlines()]
    unique = []
    for s in symbols:
        pattern = re.compile(PATTERNS[s.kind].format(re.escape(s.name)))
        if defined[s.name] == 1 and sum(bool(pattern.search(line)) for line in lines) == 1:
            unique.append(s)
    packages = top_level_names(root)
    return Repo(package=packages[0] if packages else "", files=files, symbols=unique)


def _numeric(repo: Repo) -> list[Symbol]:
    """Its numeric constants: a long-horizon answer is a list of numbers."""
    return [s for s in repo.symbols if s.kind == "const" and isinstance(s.value, int | float)]


def _ids(tasks: list[Task], name: str, env: str | None = None) -> list[Task]:
    """Task ids that name the source: `<suite>/<source>/<kind>-<n>`, unique within a data folder; each
    task names the source's environment, if it has one."""
    return [t.model_copy(update={"id": f"{t.suite}/{name}/{i}", "source": name, "env": env})
            for i, t in enumerate(tasks)]  # fmt: skip


def mine(
    name: str,
    repo_rel: str,
    data_dir: Path,
    split: str,
    wants: dict[str, int],
    seed: int,
    env: str | None = None,
) -> dict[str, list[Task]]:
    """Candidate tasks of each wanted suite from the source copy at `data_dir/repo_rel`. Suites that
    plant a change (lint, bugfix) write each task's own snapshot beside the source's. `env` is the
    source's environment (relative to data_dir): probes and checks run its Python."""
    python = env_python(data_dir, env) if env else PYTHON
    root = data_dir / repo_rel
    repo = read_repo(root)
    out: dict[str, list[Task]] = {}
    for suite, want in sorted(wants.items()):
        if want <= 0:
            continue
        rng = random.Random(f"{suite}-{name}-{seed}")  # each suite of each source draws on its own
        if suite == "lookup":
            tasks = lookup.repo_tasks(repo, repo_rel, split)
            tasks = [tasks[i] for i in sorted(rng.sample(range(len(tasks)), min(want, len(tasks))))]
        elif suite == "multi_lookup":
            tasks = _multi_lookup_tasks(rng, repo, repo_rel, split, want)
        elif suite == "long_horizon":
            # Distinct triples of its numeric constants: a real module has few, unlike generated repos.
            triples = list(itertools.combinations(_numeric(repo), 3))
            rng.shuffle(triples)
            tasks = [long_horizon.task(list(c), repo_rel, split, i) for i, c in enumerate(triples[:want])]
        elif suite == "edit":
            tasks = _edit_tasks(rng, repo, root, repo_rel, split, want, python)
        elif suite == "lint":
            tasks = lint.repo_tasks(rng, data_dir, root, split, f"{name}-lint", want, python)
        elif suite == "bugfix":
            packages = top_level_names(root)
            functions = repo_functions(root)
            tasks = bugfix.repo_tasks(rng, data_dir, root, packages, functions, split, f"{name}-bugfix", want, 3,
                                      python)  # fmt: skip
        else:
            raise ValueError(f"source {name!r}: tasks: no way to mine suite {suite!r}")
        out[suite] = _ids(tasks, name, env)
    return out


def _multi_lookup_tasks(rng: random.Random, repo: Repo, repo_rel: str, split: str, want: int) -> list[Task]:
    """Up to `want` questions, each asking for a distinct handful of the source's numeric constants (two
    or three, as the generated suite's); a source with fewer than two gives none. Numbers only: the
    keyed answer ("A = 80, B = 0.5") is checked as written, and a string's quotes are not in its value."""
    consts = _numeric(repo)
    if len(consts) < 2:
        return []
    chosen: dict[tuple[str, ...], list[Symbol]] = {}
    for _ in range(want * 4):  # draws repeat on a small module: a few more tries, then what there is
        pick = rng.sample(consts, min(len(consts), rng.randint(*multi_lookup.NAMES)))
        chosen.setdefault(tuple(sorted(c.name for c in pick)), pick)
        if len(chosen) == want:
            break
    return [multi_lookup.task(pick, repo_rel, split, i) for i, pick in enumerate(chosen.values())]


def _edit_tasks(
    rng: random.Random, repo: Repo, root: Path, repo_rel: str, split: str, want: int, python: str = PYTHON
) -> list[Task]:
    """Renames of functions and changes of integer constants, alternating, on the unchanged source."""
    packages = top_level_names(root)
    rows = probe_functions(root, packages, repo_functions(root), rng, n=4, python=python)
    functions = [s for s in repo.symbols if s.kind == "function"]
    consts = [s for s in repo.symbols if s.kind == "const" and isinstance(s.value, int)]
    rng.shuffle(functions)
    rng.shuffle(consts)
    names = {s.name for s in repo.symbols}
    tasks: list[Task] = []
    # A parameter task needs a function whose every probed answer is an int: `+ offset` must hold for
    # each of them (the check asserts all), which a str or list answer would not survive.
    answers: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for m, rs in rows.items():
        for f, a, r in rs:
            answers.setdefault((m, f), []).append((a, r))
    ints = {k: [a for a, _ in v] for k, v in answers.items() if len(v) >= 2 and all(edit.is_int(r) for _, r in v)}
    params = [s for s in functions if (module_of(s.path), s.name) in ints]
    while len(tasks) < want and (functions or consts or params):
        if functions:
            tasks.append(edit.rename_task(rng, repo, rows, repo_rel, split, names, functions.pop(), packages))
        if consts and len(tasks) < want:
            tasks.append(edit.constant_task(rng, repo, rows, repo_rel, split, consts.pop(), packages))
        if params and len(tasks) < want:
            fn = params.pop()
            example = ints[(module_of(fn.path), fn.name)][0]
            tasks.append(edit.param_task(repo, rows, repo_rel, split, fn, packages, example))
    return tasks


def mine_sources(
    sources: list[SourceConfig],
    seed: int,
    out: Path,
    store: StoreConfig | None = None,
    say: Callable[[str], None] = lambda _: None,
    workers: int = 4,
    processes: int = 1,
    use_ray: bool = False,
) -> tuple[dict[str, list[Task]], dict[str, Trajectory], list[SourceInfo], dict]:
    """Copy each source into `out/repos/<split>/<name>`, build its environment if it has dependencies
    (`out/envs/<name>`, harnessrl/sources/envs.py), mine up to `src.tasks[suite]` candidates of each
    suite from it, and keep the valid ones (run, as every episode of them, with the environment's
    Python). Returns the kept tasks by split, the expert's episode of each (by task id), what was
    copied, and per source and suite: candidates, kept, drops by reason and the expert's success
    (kept over those whose snapshot failed the check).

    Sources are independent: with `processes` > 1 they are mined in a process pool, with `use_ray` as
    Ray tasks (on the cluster at RAY_ADDRESS, whose nodes must all mount `out`, else on a local Ray),
    each source's episodes `workers` at a time. The results are put together in the config's order,
    so the data is the same bytes either way."""
    kept: dict[str, list[Task]] = {s: [] for s in SPLITS}
    episodes: dict[str, Trajectory] = {}
    infos, stats = [], {}
    jobs = [(src, seed, out, store, workers) for src in sources]
    if use_ray:
        results = _on_ray(jobs, say)
    elif processes > 1 and len(sources) > 1:
        with ProcessPoolExecutor(min(processes, len(sources)), mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(mine_source, *job) for job in jobs]
            results = []
            for src, future in zip(sources, futures, strict=True):
                results.append(future.result())
                say(f"source {src.name}: {_kept_line(results[-1][3])}")
    else:
        results = []
        for src, job in zip(sources, jobs, strict=True):
            say(f"source {src.name}: mining {dict(src.tasks) or 'nothing (corpus only)'}")
            results.append(mine_source(*job))
            say(f"source {src.name}: {_kept_line(results[-1][3])}")
    for src, (good, runs, info, per_suite) in zip(sources, results, strict=True):
        kept[src.split] += good
        episodes.update(runs)
        infos.append(info)
        stats[src.name] = per_suite
    return kept, episodes, infos, stats


def _on_ray(jobs: list[tuple], say: Callable[[str], None]) -> list[tuple]:
    """mine_source of each job as a Ray task, results in job order."""
    import ray

    from harnessrl.rl.fleet import start_ray

    with tempfile.TemporaryDirectory(prefix="hrl-data-ray-") as ray_dir:
        started = start_ray(ray_dir)
        try:
            remote = ray.remote(num_cpus=1)(mine_source)
            refs = [remote.remote(*job) for job in jobs]
            results = []
            for job, ref in zip(jobs, refs, strict=True):
                results.append(ray.get(ref))
                say(f"source {job[0].name}: {_kept_line(results[-1][3])} (a Ray task)")
            return results
        finally:
            if started:
                ray.shutdown()


def _kept_line(per_suite: dict) -> str:
    return ", ".join(f"{suite} {s['kept']} of {s['candidates']}" for suite, s in per_suite.items()) or "no tasks"


def mine_source(
    src: SourceConfig, seed: int, out: Path, store: StoreConfig | None, workers: int
) -> tuple[list[Task], dict[str, Trajectory], SourceInfo, dict]:
    """One source, copied in, its environment built, mined and validated: (kept tasks, the expert's
    episode of each, what was copied, per suite its mining stats). Runs in a worker process too."""
    rel = f"repos/{src.split}/{src.name}"
    info = copy_source(src, out / rel, store)
    try:
        env = build_env(src.name, out / rel, out)
    except EnvError as e:
        raise SourceError(str(e)) from e
    info = dataclasses.replace(info, env=env)
    try:
        candidates = mine(src.name, rel, out, src.split, dict(src.tasks), seed, env.path if env else None)
    except (OSError, ValueError) as e:
        raise SourceError(f"source {src.name!r}: mining failed: {type(e).__name__}: {e}") from e
    kept, episodes, stats = [], {}, {}
    for suite, tasks in candidates.items():
        good, runs, dropped = validate(tasks, out, workers=workers)
        kept += good
        episodes.update(runs)
        stats[suite] = mining_stats(len(tasks), len(good), reasons(dropped))
    return kept, episodes, info, stats
