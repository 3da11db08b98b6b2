"""The suites by name, and building one into a directory (layout in task.py).

A suite is built from generated repos, or mined from real source directories (harnessrl/tasks/mine.py).
Either way every task is validated before it is written (harnessrl/tasks/validate.py): its check
fails on the untouched snapshot and passes on the expert's solution. Drops are counted by reason in
suite.json, which `harnessrl tasks stats` reads.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from harnessrl.config import SourceConfig
from harnessrl.io import atomic_dir
from harnessrl.sources.copies import write_sources
from harnessrl.tasks import bugfix, edit, hard_lookup, lint, long_horizon, lookup, multi_lookup
from harnessrl.tasks.mine import mine_sources
from harnessrl.tasks.task import SPLITS, Task, split_of, write_suite_info, write_tasks
from harnessrl.tasks.validate import mining_stats, reasons, validate

# name -> build(out, seed, num) -> tasks from generated repos; each writes its snapshots under out/repos/<split>/.
SUITES: dict[str, Callable[[Path, int, int], list[Task]]] = {
    "lookup": lookup.build,
    "edit": edit.build,
    "bugfix": bugfix.build,
    "long_horizon": long_horizon.build,
    "lint": lint.build,
    "multi_lookup": multi_lookup.build,
    "hard_lookup": hard_lookup.build,
}


def source_configs(paths: list[Path], suite: str, num: int) -> list[SourceConfig]:
    """Directories given on the command line as sources, named by their folder; with two or more, a
    quarter of them (at least one) held out whole."""
    names = [p.name.replace(" ", "_") or "source" for p in paths]
    if len(set(names)) < len(names):
        raise ValueError(f"--source: two sources share a folder name ({', '.join(names)}); each needs its own")
    split = lambda i: split_of(i, len(paths)) if len(paths) > 1 else "train"
    return [
        SourceConfig(name=n, path=str(p), split=split(i), tasks={suite: num})
        for i, (n, p) in enumerate(zip(names, paths, strict=True))
    ]


def build_suite(
    name: str,
    out: Path | str,
    seed: int = 0,
    num: int = 40,
    sources: list[Path] | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> dict:
    """Build a suite directory atomically (a failed build leaves nothing); returns what suite.json says.
    `num` counts tasks over generated repos (a quarter held out), or tasks per source."""
    if name not in SUITES:
        raise KeyError(f"unknown suite {name!r}; suites: {', '.join(SUITES)}")
    if num < 2 and not sources:
        raise ValueError(f"num must be at least 2 (one train and one held-out task), got {num}")
    with atomic_dir(Path(out)) as tmp:
        if sources:
            mined, _, infos, stats = mine_sources(source_configs(sources, name, num), seed, tmp, say=say)
            tasks = mined["train"] + mined["heldout"]
            write_sources(tmp, infos)
        else:
            candidates = SUITES[name](tmp, seed, num)
            tasks, _, dropped = validate(candidates, tmp)
            stats = {"generated": {name: mining_stats(len(candidates), len(tasks), reasons(dropped))}}
        (tmp / "mining.json").write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n")
        for split in SPLITS:
            write_tasks(tmp / "tasks" / f"{split}.jsonl", [t for t in tasks if t.split == split])
        drops: Counter[str] = Counter()  # by reason; an attack's by its name ("attack passes: empty_file")
        for per in stats.values():
            drops.update(per.get(name, {}).get("dropped", {}))
        info = {
            "suite": name,
            "seed": seed,
            "num": num,
            "source": [str(p) for p in sources] if sources else None,
            "counts": {s: sum(t.split == s for t in tasks) for s in SPLITS},
            "dropped": sum(drops.values()),
            "dropped_by": dict(sorted(drops.items())),
        }
        write_suite_info(tmp, info)
    return info
