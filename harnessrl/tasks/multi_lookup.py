"""The multi_lookup suite: "What are the values of A and B?", a search per name, no context budget.

The lookup suite's repos and tools, with two or three names per question. The searches are
independent, so the policy may make them one per turn or all in one turn; the harness runs a turn's
calls in parallel, and the reward's efficiency terms (turns, parallel) say which it should prefer.
The expert does both (DataConfig.multi_lookup.parallel_share), so SFT puts parallel calls within
reach, and what RL does with them is the lesson (bench/lessons.py).

The answer names each value ("A = 201, B = 738"): a tiny model copies a value after its name
reliably, and the k-th value of a list not at all (shared/LESSONS-NOTES.md, finding 2). The checker
compares names and values, so a miscopied name fails.
"""

from __future__ import annotations

import random
from pathlib import Path

from harnessrl.config import MultiLookupDataConfig
from harnessrl.tasks import lookup
from harnessrl.tasks.repogen import Repo, Symbol
from harnessrl.tasks.task import Check, Solution, Task

SUITE = "multi_lookup"
TOOLS = lookup.TOOLS
# Constants per task, inclusive, for `harnessrl tasks build`: the data config's own defaults.
NAMES = (MultiLookupDataConfig().names_min, MultiLookupDataConfig().names_max)


def question(names: list[str]) -> str:
    return f"What are the values of {', '.join(names[:-1])} and {names[-1]}?"  # answered in this order


def keyed(pairs: list[tuple[str, object]]) -> str:
    """The answer's form: `A = 201, B = 738`."""
    return ", ".join(f"{name} = {value}" for name, value in pairs)


def task(chosen: list[Symbol], repo_rel: str, split: str, i: int, suite: str = SUITE) -> Task:
    """A task asking for the values of the `chosen` constants, in that order, answered keyed (the
    long-horizon suite asks the same question, under a context budget)."""
    names = [c.name for c in chosen]
    return Task(
        id=f"{suite}/{repo_rel.split('/')[-1]}/{i}",
        suite=suite,
        split=split,  # type: ignore[arg-type]
        repo=repo_rel,
        instruction=question(names),
        tools=TOOLS,
        check=Check(kind="answer", answer=keyed([(c.name, c.value) for c in chosen])),
        solution=Solution(kind="values", names=names),
    )


def picks(rng: random.Random, repo: Repo, num: int, names: tuple[int, int]) -> list[list[Symbol]]:
    """`num` random handfuls of a repo's constants, between names[0] and names[1] each (as many as it has)."""
    consts = repo.of_kind("const")
    return [rng.sample(consts, min(len(consts), rng.randint(*names))) for _ in range(num)]


def repo_tasks(
    rng: random.Random, repo: Repo, repo_rel: str, split: str, num: int, names: tuple[int, int]
) -> list[Task]:
    """`num` tasks on one repo, each asking for a random handful of its constants."""
    return [task(chosen, repo_rel, split, i) for i, chosen in enumerate(picks(rng, repo, num, names))]


def build(out: Path, seed: int, num: int) -> list[Task]:
    """`num` tasks over generated repos (two per repo), a quarter held out from their own repos."""
    rng = random.Random(f"{SUITE}-{seed}")  # suites built with one seed still differ
    repos = lookup.generate(rng, num // 2 + 2, lookup.FILES_PER_REPO)
    tasks = [t for rel, repo, _ in repos for t in repo_tasks(rng, repo, rel, rel.split("/")[1], 2, NAMES)]
    return lookup.choose(rng, out, repos, tasks, num)
