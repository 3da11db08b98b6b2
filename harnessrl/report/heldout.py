"""The held-out tasks of an eval, from either kind of folder:

- a recipe's data folder: `heldout.jsonl`, one row per task under "task" (harnessrl/data/build.py);
- a suite directory from `harnessrl tasks build`: `tasks/heldout.jsonl` + `repos/`.

Tasks are taken per suite, in file order, at most `num_tasks` each; a task listed twice runs once
(more copies would only weigh it more). Every snapshot is checked to exist here, so a bad folder
fails before the first episode, not in the middle of an eval.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from harnessrl.config.stages import shares
from harnessrl.tasks.task import Task, TaskFileError, load_suite


def _data_folder_tasks(path: Path) -> list[Task]:
    tasks = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            tasks.append(Task.model_validate(json.loads(line)["task"]))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise TaskFileError(f"{path}:{n}: not a JSON object with a 'task' field") from None
        except ValidationError as e:
            err = e.errors()[0]
            raise TaskFileError(f"{path}:{n}: field 'task.{'.'.join(map(str, err['loc']))}': {err['msg']}") from None
    return tasks


def load_heldout(data_dir: Path | str, mix: dict[str, float], num_tasks: int) -> list[Task]:
    """Held-out tasks, suite by suite: `num_tasks` shared among the mix's suites by weight, and each
    suite's share taken from each of its sources (generated repos, each real source), which the
    report keeps apart. Raises TaskFileError (a ValueError) naming the folder, file or suite that is
    wrong."""
    data_dir = Path(data_dir)
    if (data_dir / "heldout.jsonl").is_file():
        tasks = _data_folder_tasks(data_dir / "heldout.jsonl")
        for t in tasks:
            if not (data_dir / t.repo).is_dir():
                raise TaskFileError(f"{data_dir / 'heldout.jsonl'}: task {t.id}: repo {data_dir / t.repo} is missing")
    elif (data_dir / "tasks" / "heldout.jsonl").is_file():
        tasks = load_suite(data_dir, "heldout")
    else:
        raise TaskFileError(
            f"{data_dir}: no held-out tasks (expected heldout.jsonl of a data folder, or tasks/heldout.jsonl "
            "of a suite from `harnessrl tasks build`)"
        )
    unique = list({t.id: t for t in tasks}.values())
    present = sorted({t.suite for t in unique})
    missing = [s for s in mix if s not in present]
    if missing:
        raise TaskFileError(
            f"{data_dir}: no held-out tasks of suite {missing[0]!r} (suites here: {', '.join(present)})"
        )
    picked = []
    for suite, n in shares(mix, num_tasks).items():
        mine = [t for t in unique if t.suite == suite]
        for source in dict.fromkeys(t.source for t in mine):
            picked += [t for t in mine if t.source == source][:n]
    return picked
