"""The swe suite: tasks imported from rows in the SWE-bench schema (as SWE-bench, SWE-Gym, SWE-smith
and R2E-Gym publish them) and local clones of their repositories.

A row: instance_id, repo ("owner/name"), base_commit, problem_statement, patch (the gold fix),
test_patch (the tests that show it), FAIL_TO_PASS and PASS_TO_PASS (pytest node ids; lists, or JSON
strings of lists as SWE-bench ships them). Other columns are ignored. For each row:
  1. find the clone: DIR/owner/name, DIR/name or DIR/owner__name;
  2. export base_commit into the task's snapshot with `git archive` (the clone is only read; the
     snapshot has no .git);
  3. apply test_patch to a scratch copy and keep the post-patch contents of every file it touches:
     the hidden check writes them over the workspace, then runs FAIL_TO_PASS and PASS_TO_PASS;
  4. validate as SWE-smith does, in the sandbox: the expert's episode (which replays the gold patch
     through the harness's tools) must pass the check, and the check must fail on the snapshot.
A row that fails a step is dropped and counted per reason in suite.json's "dropped"; a row that does
not fit the schema refuses the import, naming FILE:line and the field.

Whole repositories are held out: a quarter of the distinct repos (at least one of two or more), or
those named.

Each row's tests run in the environment of its repository at its environment commit, as SWE-bench's
images give each (repo, version) one: a venv built once per (repo, environment_setup_commit, else
version, else base_commit) from the dependencies the repo declares at that commit (requirements*.txt,
pyproject.toml, setup.py; harnessrl/sources/envs.py), installed through the package registry and
cached by the hash of its lock. Its folder `envs/swe/<repo>-<key>/` (requirements.in, lock.txt) lands
in the suite, and the task names it (`Task.env`): the checks and the terminal tools then run its
Python in the sandbox. A repo that declares nothing runs on the harness's own Python. A row whose
environment cannot be built is dropped as "env_failed".
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harnessrl.config import Budgets
from harnessrl.harness.episode import Trajectory
from harnessrl.io import atomic_dir
from harnessrl.sources.envs import EnvError, build_env
from harnessrl.tasks.diffs import PatchError, UnsupportedPatch, parse_patch
from harnessrl.tasks.task import SPLITS, Check, Solution, Task, TaskFileError, split_of, write_suite_info, write_tasks
from harnessrl.tasks.validate import mining_stats, reasons, validate

SUITE = "swe"
TOOLS = ["list_dir", "read_file", "grep", "edit_file", "write_file", "run_tests", "run_terminal", "finish"]
CHECK_TIMEOUT_S = 300.0
# The expert replays a patch hunk by hunk: allow long patches more turns and tokens than an RL episode.
VALIDATION_BUDGETS = Budgets(max_turns=400, max_tokens=1 << 24, max_turn_tokens=1 << 20, wall_s=3600.0)

# Why a row was dropped, in suite.json's "dropped".
REPO_MISSING = "repo missing"
COMMIT_MISSING = "commit missing"
TEST_PATCH = "test_patch does not apply"
PATCH = "patch does not apply"
UNSUPPORTED = "patch unsupported"
BAD_ROW = "bad row"
ENV_FAILED = "env_failed"


class SweRow(BaseModel):
    """One row of the SWE-bench schema; columns beyond these are ignored."""

    model_config = ConfigDict(extra="ignore")
    instance_id: str = Field(min_length=1)
    repo: str = Field(min_length=1, pattern=r"^[\w.-]+(/[\w.-]+)?$")
    base_commit: str = Field(min_length=1, pattern=r"^[0-9a-fA-F]{4,40}$")
    problem_statement: str = Field(min_length=1)
    patch: str = Field(min_length=1)
    test_patch: str = Field(min_length=1)
    FAIL_TO_PASS: list[str] = Field(min_length=1)
    PASS_TO_PASS: list[str]
    # Which environment the row's tests need (SWE-bench; SWE-Gym has only version): rows that share one
    # share a venv. Without either, the row's own base commit.
    environment_setup_commit: str | None = Field(None, pattern=r"^[0-9a-fA-F]{4,40}$")
    version: str | None = None

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, v: Any) -> Any:
        return None if v is None else str(v)  # SWE-bench ships "0.12"; some exports a float

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, v: Any) -> Any:
        if isinstance(v, str):  # SWE-bench ships these as JSON strings of lists
            try:
                return json.loads(v)
            except json.JSONDecodeError as e:
                raise ValueError(f"not a list of test ids, nor a JSON string of one ({e.msg})") from None
        return v


def read_rows(path: Path) -> list[tuple[str, SweRow]]:
    """(where, row) for each row of a JSONL, JSON-list or Parquet file; `where` is FILE:line (FILE:row
    N for JSON lists and Parquet). A row that does not fit the schema raises TaskFileError naming it."""
    if not path.is_file():
        raise TaskFileError(f"{path}: file not found")
    raw: list[tuple[str, Any]] = []
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as e:
            raise TaskFileError(f"{path}: not a Parquet file ({e})") from None
        raw = [(f"{path}:row {i}", r) for i, r in enumerate(table.to_pylist(), 1)]
    elif path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise TaskFileError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
        if not isinstance(data, list):
            raise TaskFileError(f"{path}: a .json file must hold a list of rows")
        raw = [(f"{path}:row {i}", r) for i, r in enumerate(data, 1)]
    else:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    raw.append((f"{path}:{n}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise TaskFileError(f"{path}:{n}: invalid JSON ({e.msg})") from None
    rows = []
    for where, r in raw:
        if not isinstance(r, dict):
            raise TaskFileError(f"{where}: a row must be an object, got {type(r).__name__}")
        try:
            rows.append((where, SweRow.model_validate(r)))
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "(row)"
            raise TaskFileError(f"{where}: field {field!r}: {err['msg']}") from None
    return rows


# -- git -----------------------------------------------------------------------------------------


class Dropped(Exception):
    def __init__(self, reason: str, why: str) -> None:
        super().__init__(why)
        self.reason = reason


def _git(*args: str, cwd: Path | None = None, ceiling: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    if ceiling is not None:  # never find a repository above the scratch copy (the suite may be in one)
        env["GIT_CEILING_DIRECTORIES"] = str(ceiling)
    return subprocess.run(
        ["git", "-c", "safe.directory=*", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def find_clone(repos: Path, repo: str) -> Path:
    tried = [repos / repo, repos / repo.split("/")[-1], repos / repo.replace("/", "__")]
    for p in dict.fromkeys(tried):
        if (p / ".git").exists() or (p / "HEAD").is_file():  # a work tree or a bare clone
            return p
    raise Dropped(REPO_MISSING, f"no clone of {repo}; tried {', '.join(str(p) for p in dict.fromkeys(tried))}")


def export_commit(clone: Path, commit: str, dest: Path) -> None:
    """base_commit's tree into dest (no .git), read from the clone without touching its work tree."""
    if _git("-C", str(clone), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}").returncode != 0:
        raise Dropped(COMMIT_MISSING, f"commit {commit} is not in {clone}")
    dest.mkdir(parents=True)
    archive = subprocess.Popen(
        ["git", "-c", "safe.directory=*", "-C", str(clone), "archive", "--format=tar", commit],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    tar = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, capture_output=True, check=False)
    assert archive.stdout is not None
    archive.stdout.close()
    if archive.wait() != 0 or tar.returncode != 0:
        raise RuntimeError(f"git archive {commit} of {clone} failed: {tar.stderr.decode(errors='replace')[-500:]}")


def apply_patch(tree: Path, patch: str, check_only: bool = False) -> str | None:
    """Apply a diff to a plain directory with `git apply`; None, or git's complaint."""
    fd, name = tempfile.mkstemp(suffix=".diff")
    with os.fdopen(fd, "w") as f:
        f.write(patch if patch.endswith("\n") else patch + "\n")
    try:
        args = ["apply", "--whitespace=nowarn", "--unidiff-zero", *(["--check"] if check_only else []), name]
        res = _git(*args, cwd=tree, ceiling=tree.parent)
    finally:
        os.unlink(name)
    return None if res.returncode == 0 else (res.stderr.strip() or f"git apply exited {res.returncode}")


# -- one row -------------------------------------------------------------------------------------


def _safe(instance_id: str) -> str:
    return re.sub(r"[^\w.-]", "_", instance_id)


def _test_paths(snapshot: Path, ids: list[str]) -> list[str]:
    return list(dict.fromkeys(i.split("::")[0] for i in ids if (snapshot / i.split("::")[0]).is_file()))


def make_task(row: SweRow, repos: Path, out: Path, split: str) -> Task:
    """The row's task with its snapshot under out/repos/<split>/; raises Dropped (the snapshot removed)."""
    for i in [*row.FAIL_TO_PASS, *row.PASS_TO_PASS]:
        if not i.strip() or i.startswith(("/", "-")) or ".." in i.split("::")[0].split("/"):
            raise Dropped(BAD_ROW, f"test id {i!r} is not a pytest node id inside the repo")
    try:
        files = parse_patch(row.patch)
    except UnsupportedPatch as e:
        raise Dropped(UNSUPPORTED, f"patch: {e}") from None
    except PatchError as e:
        raise Dropped(BAD_ROW, f"field 'patch': {e}") from None
    try:
        test_files = [f.path for f in parse_patch(row.test_patch)]
    except PatchError:
        test_files = None  # git apply judges it below; deletions and renames are fine there
    clone = find_clone(repos, row.repo)
    rel = f"repos/{split}/{_safe(row.instance_id)}"
    snapshot, scratch = out / rel, out / ".work" / _safe(row.instance_id)
    try:
        export_commit(clone, row.base_commit, snapshot)
        shutil.copytree(snapshot, scratch)
        if (why := apply_patch(scratch, row.test_patch)) is not None:
            raise Dropped(TEST_PATCH, why)
        if test_files is None:  # e.g. a rename: every file the patched tree has that differs or is gone
            test_files = _changed_files(snapshot, scratch)
        hidden = {}
        for p in test_files:
            f = scratch / p
            try:
                hidden[p] = f.read_text() if f.is_file() else None
            except UnicodeDecodeError:
                raise Dropped(BAD_ROW, f"test_patch: {p} is not UTF-8 text") from None
        if (why := apply_patch(snapshot, row.patch, check_only=True)) is not None:
            raise Dropped(PATCH, why)
        if any(f.path in hidden for f in files):
            raise Dropped(BAD_ROW, "patch and test_patch change the same file")
    except BaseException:
        shutil.rmtree(snapshot, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Task(
        id=f"{SUITE}/{split}/{row.instance_id}",
        suite=SUITE,
        split=split,  # type: ignore[arg-type]
        repo=rel,
        instruction=row.problem_statement,
        tools=TOOLS,
        source=row.repo,
        check=Check(
            kind="swe",
            test_files=hidden,
            fail_to_pass=row.FAIL_TO_PASS,
            pass_to_pass=row.PASS_TO_PASS,
            timeout_s=CHECK_TIMEOUT_S,
        ),
        solution=Solution(
            kind="swe",
            patch=row.patch,
            test_paths=_test_paths(snapshot, row.FAIL_TO_PASS) or _test_paths(snapshot, row.PASS_TO_PASS),
        ),
    )


def _changed_files(before: Path, after: Path) -> list[str]:
    names = {p.relative_to(d).as_posix() for d in (before, after) for p in d.rglob("*") if p.is_file()}
    return sorted(
        n for n in names if not (before / n).is_file() or not (after / n).is_file() or
        (before / n).read_bytes() != (after / n).read_bytes()
    )  # fmt: skip


# -- the suite -------------------------------------------------------------------------------------


def heldout_repos(repos: list[str], chosen: list[str] | None, seed: int) -> set[str]:
    """The held-out repos: `chosen` (each must be a row's repo), else a quarter of them by split_of."""
    distinct = sorted(set(repos))
    if chosen is not None:
        unknown = [r for r in chosen if r not in distinct]
        if unknown:
            raise ValueError(
                f"heldout repos (--heldout-repos, data.swe[].heldout_repos): {', '.join(unknown)} not a repo of any row; repos: {', '.join(distinct)}"
            )
        return set(chosen)
    if len(distinct) < 2:
        return set()
    random.Random(f"{SUITE}-{seed}").shuffle(distinct)
    return {r for i, r in enumerate(distinct) if split_of(i, len(distinct)) == "heldout"}


Envs = dict[tuple[str, str], str | EnvError | None]  # (repo, key) -> env folder, why it failed, or None


def row_env(row: SweRow, repos: Path, snapshot: Path, out: Path, envs: Envs, log: Callable[[str], None]) -> str | None:
    """The environment folder (relative to `out`) the row's tests run in, built the first time its
    (repo, environment key) is met, from what the repo declares at the environment commit; None where
    it declares no dependencies. Raises Dropped(ENV_FAILED) where it cannot be built."""
    key = (row.repo, row.environment_setup_commit or row.version or row.base_commit)
    if key not in envs:
        name = f"swe/{row.repo.replace('/', '__')}-{_safe(key[1])[:16]}"
        commit = row.environment_setup_commit or row.base_commit
        try:
            if commit == row.base_commit:
                info = build_env(name, snapshot, out, log)
            else:  # the environment commit's own declared dependencies
                with tempfile.TemporaryDirectory(prefix="swe-env-") as tmp:
                    export_commit(find_clone(repos, row.repo), commit, Path(tmp) / "tree")
                    info = build_env(name, Path(tmp) / "tree", out, log)
            envs[key] = info.path if info else None
        except EnvError as e:
            envs[key] = e
        except Dropped as e:
            envs[key] = EnvError(f"environment commit of {row.repo}: {e}")
    found = envs[key]
    if isinstance(found, EnvError):
        raise Dropped(ENV_FAILED, str(found).splitlines()[0][:300])
    return found


def swe_candidates(
    rows: list[tuple[str, SweRow]], repos: Path, out: Path, held: set[str], log: Callable[[str], None]
) -> tuple[list[Task], Counter[str]]:
    """Each row's task, its snapshot written under out/repos/<split>/ and its environment built (not
    yet validated), and the rows dropped before validation, by reason."""
    dropped: Counter[str] = Counter()
    candidates: list[Task] = []
    seen: set[str] = set()
    envs: Envs = {}
    for i, (where, row) in enumerate(rows, 1):
        reason = why = None
        if row.instance_id in seen:
            reason, why = BAD_ROW, f"{where}: instance_id {row.instance_id!r} repeats an earlier row"
        else:
            seen.add(row.instance_id)
            try:
                task = make_task(row, repos, out, "heldout" if row.repo in held else "train")
                try:
                    task.env = row_env(row, repos, out / task.repo, out, envs, log)
                except Dropped:
                    shutil.rmtree(out / task.repo, ignore_errors=True)
                    raise
                candidates.append(task)
            except Dropped as e:
                reason, why = e.reason, str(e)
        if reason is not None:
            dropped[reason] += 1
            log(f"[{i}/{len(rows)}] {row.instance_id}: dropped, {reason}: {why}")
    shutil.rmtree(out / ".work", ignore_errors=True)
    return candidates, dropped


def validate_rows(
    candidates: list[Task], out: Path, workers: int, log: Callable[[str], None]
) -> tuple[list[Task], dict[str, Trajectory], Counter[str]]:
    """Validation as every suite's (harnessrl/tasks/validate.py), with budgets for long patches; a
    dropped row's snapshot is removed. Returns the kept tasks, the expert's episodes, drops by reason."""
    kept, episodes, dropped = validate(candidates, out, workers=workers, budgets=VALIDATION_BUDGETS)
    for task in candidates:
        if task.id in dropped:
            log(f"{task.id}: dropped, {dropped[task.id][0]}: {dropped[task.id][1]}")
            shutil.rmtree(out / task.repo, ignore_errors=True)
        else:
            log(f"{task.id}: kept ({task.split})")
    return kept, episodes, reasons(dropped)


def import_swebench(
    path: Path | str,
    repos: Path | str,
    out: Path | str,
    heldout: list[str] | None = None,
    seed: int = 0,
    workers: int = 4,
    log: Callable[[str], None] = print,
) -> dict:
    """Build the swe suite directory `out` (atomically: a killed import leaves nothing) from the rows
    of `path` and clones under `repos`; returns what suite.json says. Raises TaskFileError for a row
    that does not fit the schema, ValueError for a bad --heldout-repos."""
    path, repos, out = Path(path), Path(repos), Path(out)
    rows = read_rows(path)
    if not repos.is_dir():
        raise FileNotFoundError(f"--repos {repos}: not a directory")
    held = heldout_repos([r.repo for _, r in rows], heldout, seed)
    n = len(rows)
    with atomic_dir(out) as tmp:
        candidates, dropped = swe_candidates(rows, repos, tmp, held, log)
        kept, _, failed = validate_rows(candidates, tmp, workers, log)
        dropped += failed
        for split in SPLITS:
            write_tasks(tmp / "tasks" / f"{split}.jsonl", [t for t in kept if t.split == split])
        info = {
            "suite": SUITE,
            "seed": seed,
            "num": len(kept),
            "source": str(path),
            "repos": str(repos),
            "rows": n,
            "heldout_repos": sorted(held),
            "counts": {s: sum(t.split == s for t in kept) for s in SPLITS},
            "dropped": dict(sorted(dropped.items())),
        }
        write_suite_info(tmp, info)
        stats = {f"swe:{path.name}": {SUITE: mining_stats(n, len(kept), dropped)}}  # for `tasks stats`
        (tmp / "mining.json").write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n")
    drops = ", ".join(f"{c} {r}" for r, c in sorted(dropped.items())) or "none"
    log(f"imported {len(kept)} of {n} rows ({info['counts']['train']} train, {info['counts']['heldout']} held out); "
        f"dropped: {drops}")  # fmt: skip
    return info
