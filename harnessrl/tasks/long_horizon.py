"""The long-horizon suite: look up several constants, one search each, and report all their values.

"What are the values of A, B and C?" on the lookup suite's repos, with its tools (grep and read_file):
the same harness, a longer task. Each value takes a search, and the searches and their results
together need more context than the long-horizon stage's budget holds. So:

- without context management the episode runs out of context before it can answer;
- truncation drops the oldest turns, and with them the value found first, which the answer needs;
- a summary that copies the values found so far, each after its name ("A = 201, B = 738"), carries
  them across the compaction, and the answer repeats it with the last value added.

The answer is copied, never computed: a tiny model trained from scratch can learn it. The expert's
summaries (tasks/expert.py) are faithful; on most tasks they are verbose, adding where each value was
found and what is left to find. A verbose summary saves too little room: the stage's context
fills again before the answer, and the stage allows one summary. So the policy's summaries before RL
are a real baseline, and RL has something to teach: where to stop.
"""

from __future__ import annotations

import random
from pathlib import Path

from harnessrl.config import LongHorizonDataConfig
from harnessrl.tasks import lookup, multi_lookup
from harnessrl.tasks.repogen import Repo, Symbol
from harnessrl.tasks.task import Task

SUITE = "long_horizon"
TOOLS = lookup.TOOLS
# Constants per task, inclusive, for `harnessrl tasks build`: the data config's own defaults.
FACTS = (LongHorizonDataConfig().facts_min, LongHorizonDataConfig().facts_max)


def task(chosen: list[Symbol], repo_rel: str, split: str, i: int) -> Task:
    """multi_lookup's task and keyed answer ("A = 201, B = 738, C = 95"), under its own suite."""
    return multi_lookup.task(chosen, repo_rel, split, i, SUITE)


def repo_tasks(
    rng: random.Random, repo: Repo, repo_rel: str, split: str, num: int, facts: tuple[int, int]
) -> list[Task]:
    """`num` tasks on one repo, each asking for a random handful of its constants."""
    return [task(chosen, repo_rel, split, i) for i, chosen in enumerate(multi_lookup.picks(rng, repo, num, facts))]


def build(out: Path, seed: int, num: int) -> list[Task]:
    """`num` tasks over generated repos (two per repo), a quarter held out from their own repos."""
    rng = random.Random(f"{SUITE}-{seed}")  # suites built with one seed still differ
    per_repo = 2
    repos = lookup.generate(rng, num // per_repo + 2, lookup.FILES_PER_REPO)
    tasks = [t for rel, repo, _ in repos for t in repo_tasks(rng, repo, rel, rel.split("/")[1], per_repo, FACTS)]
    return lookup.choose(rng, out, repos, tasks, num)
