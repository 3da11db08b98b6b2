"""The suites by name, and building one into a directory (layout in task.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harnessrl.io import atomic_dir
from harnessrl.tasks import bugfix, edit, long_horizon, lookup
from harnessrl.tasks.task import SPLITS, Task, write_suite_info, write_tasks

# name -> build(out, seed, num, source) -> tasks; each writes its snapshots under out/repos/<split>/.
SUITES: dict[str, Callable[[Path, int, int, Path | None], list[Task]]] = {
    "lookup": lookup.build,
    "edit": edit.build,
    "bugfix": bugfix.build,
    "long_horizon": long_horizon.build,
}


def build_suite(name: str, out: Path | str, seed: int = 0, num: int = 40, source: Path | str | None = None) -> dict:
    """Build a suite directory atomically (a failed build leaves nothing); returns what suite.json says."""
    if name not in SUITES:
        raise KeyError(f"unknown suite {name!r}; suites: {', '.join(SUITES)}")
    if num < 2:
        raise ValueError(f"num must be at least 2 (one train and one held-out task), got {num}")
    with atomic_dir(Path(out)) as tmp:
        tasks = SUITES[name](tmp, seed, num, Path(source) if source is not None else None)
        for split in SPLITS:
            write_tasks(tmp / "tasks" / f"{split}.jsonl", [t for t in tasks if t.split == split])
        info = {
            "suite": name,
            "seed": seed,
            "num": num,
            "source": str(source) if source is not None else None,
            "counts": {s: sum(t.split == s for t in tasks) for s in SPLITS},
        }
        write_suite_info(tmp, info)
    return info
