"""What a task is, and how a suite of them lies on disk.

A suite directory, written by `build_suite` and read by everything downstream:
    suite.json              {"suite", "seed", "num", "source", "counts", "dropped", "dropped_by"}: how it
                            was built, and how many candidates validation refused, by reason (an
                            attack that passed a check by its name); swe has "dropped": {reason:
                            rows}, "heldout_repos", "rows", "repos"
    tasks/train.jsonl       one Task per line
    tasks/heldout.jsonl     tasks whose repos no train task uses
    repos/<id>/...          repo snapshots; Task.repo points at one, relative to the suite dir

The policy sees only `instruction` (and the tools). `check` is hidden: it holds the expected answer or
a test file the checker runs against the workspace, never a copy in the workspace the agent could
edit. `solution` is what the scripted expert (and the tests) know about the intended change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SPLITS = ("train", "heldout")


class TaskFileError(ValueError):
    """A task file is missing, not JSON, or a row does not validate; the message names file, line, field."""


class Check(BaseModel):
    """How success is decided. "answer": the final answer must equal `answer` (numbers compared as
    numbers). "tests": `test` (a hidden file of pytest-style test_* functions) must pass against the
    workspace, importing the workspace's own top-level `packages`. "swe" (an imported SWE-bench row):
    `test_files` (path -> full contents after the row's test_patch, None for a file it deletes) are
    written over the workspace, then every id of `fail_to_pass` and `pass_to_pass` must pass pytest."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["answer", "tests", "swe"]
    answer: str | None = None
    test: str | None = None
    packages: list[str] = []
    test_files: dict[str, str | None] = {}
    fail_to_pass: list[str] = []
    pass_to_pass: list[str] = []
    timeout_s: float = Field(60.0, gt=0)

    @property
    def test_ids(self) -> list[str]:
        """A swe row's test ids: FAIL_TO_PASS, then PASS_TO_PASS."""
        return [*self.fail_to_pass, *self.pass_to_pass]


class Solution(BaseModel):
    """What the expert knows; never shown to the policy. Which fields are set depends on `kind`:
    lookup value/class/function: name; edit rename: name, new_name; edit constant: name, value;
    edit param: name, path, param; bugfix: path, old, new, test_path; long_horizon values: names;
    swe: patch (the gold diff), test_paths (existing test files the expert runs after applying it)."""

    model_config = ConfigDict(extra="forbid")
    kind: str
    name: str | None = None
    new_name: str | None = None
    value: str | None = None
    param: str | None = None
    path: str | None = None
    old: str | None = None
    new: str | None = None
    test_path: str | None = None
    names: list[str] | None = None
    patch: str | None = None
    test_paths: list[str] | None = None


class Task(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    suite: str
    split: Literal["train", "heldout"]
    repo: str = Field(description="the repo snapshot dir, relative to the suite dir")
    instruction: str
    tools: list[str]
    user: str | None = Field(None, description="what the simulated user answers to ask_user")
    source: str | None = Field(None, description="the data source it was mined from (None: generated repos)")
    env: str | None = Field(
        None,
        description="its source's environment folder, relative to the suite dir (harnessrl/sources/envs.py): "
        "checks, probes and the terminal tools run that environment's Python (None: the harness's own)",
    )
    check: Check
    solution: Solution


def split_of(i: int, n: int) -> str:
    """Item i of n (repos, sources, modules) is held out when it falls in the last quarter (at least one)."""
    return "heldout" if i >= n - max(1, n // 4) else "train"


def write_tasks(path: Path, tasks: list[Task]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(t.model_dump_json() + "\n" for t in tasks))


def load_tasks(path: Path | str) -> list[Task]:
    """Every task of a JSONL file; a bad row raises TaskFileError naming the file, line and field."""
    path = Path(path)
    if not path.is_file():
        raise TaskFileError(f"{path}: task file not found")
    tasks = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            tasks.append(Task.model_validate_json(line))
        except ValidationError as e:
            problems = "; ".join(_problem(err) for err in e.errors())
            raise TaskFileError(f"{path}:{n}: {problems}") from None
    return tasks


def _problem(err: dict) -> str:
    if err["type"] == "json_invalid":
        return f"invalid JSON ({err['msg']})"
    field = ".".join(str(p) for p in err["loc"]) or "(row)"
    return f"field {field!r}: {err['msg']}"


def load_suite(suite_dir: Path | str, split: str) -> list[Task]:
    """The tasks of one split, with each snapshot checked to exist (so a run fails here, not mid-episode)."""
    suite_dir = Path(suite_dir)
    if split not in SPLITS:
        raise TaskFileError(f"unknown split {split!r}; splits are {', '.join(SPLITS)}")
    if not suite_dir.is_dir():
        raise TaskFileError(f"{suite_dir}: suite directory not found")
    path = suite_dir / "tasks" / f"{split}.jsonl"
    tasks = load_tasks(path)
    for t in tasks:
        if not (suite_dir / t.repo).is_dir():
            raise TaskFileError(f"{path}: task {t.id}: field 'repo': {suite_dir / t.repo} is not a directory")
    return tasks


def write_suite_info(suite_dir: Path, info: dict) -> None:
    (suite_dir / "suite.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
