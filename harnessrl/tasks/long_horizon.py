"""The long-horizon suite: gather many values spread over many files and report their sum.

A registry module lists (module, constant) pairs; the answer is the sum of those constants. With 10-16
parts in as many modules, reading them takes more turns and more context than a small budget holds:
the tasks for the self-summarization stage, where the agent must carry partial sums forward.
"""

from __future__ import annotations

import random
from pathlib import Path

from harnessrl.tasks.repogen import Repo, generate_repo
from harnessrl.tasks.task import Check, Solution, Task, split_of

SUITE = "long_horizon"
TOOLS = ["list_dir", "grep", "read_file"]


def add_registry(rng: random.Random, repo: Repo, parts: int) -> tuple[str, int]:
    """Write <package>/registry.py naming one constant from each of `parts` modules; (path, sum)."""
    by_module: dict[str, list] = {}
    for c in repo.of_kind("const"):
        by_module.setdefault(c.path, []).append(c)
    chosen = [rng.choice(by_module[p]) for p in rng.sample(sorted(by_module), min(parts, len(by_module)))]
    lines = ['"""The parts that make up the total: (module, constant name) pairs."""', "", "PARTS = ["]
    lines += [f'    ("{c.path[:-3].replace("/", ".")}", "{c.name}"),' for c in chosen]
    lines.append("]")
    path = f"{repo.package}/registry.py"
    repo.files[path] = "\n".join(lines) + "\n"
    return path, sum(c.value or 0 for c in chosen)


def build(out: Path, seed: int, num: int, source: Path | None = None) -> list[Task]:
    """One task per generated repo (12-18 modules); a quarter held out."""
    if source is not None:
        raise ValueError("the long_horizon suite is generated; --source is for bugfix")
    rng = random.Random(f"{SUITE}-{seed}")  # suites built with one seed still differ
    tasks = []
    for i in range(num):
        split = split_of(i, num)
        rel = f"repos/{split}/r{i:04d}"
        repo = generate_repo(rng, rng.randint(12, 18))
        path, total = add_registry(rng, repo, rng.randint(10, 16))
        repo.write(out / rel)
        tasks.append(
            Task(
                id=f"{SUITE}/r{i:04d}",
                suite=SUITE,
                split=split,
                repo=rel,  # type: ignore[arg-type]
                instruction=f"{path} lists (module, constant) pairs in PARTS. "
                "What is the sum of the values of those constants? Answer with the number.",
                tools=TOOLS,
                check=Check(kind="answer", answer=str(total)),
                solution=Solution(kind="sum", path=path),
            )
        )
    return tasks
