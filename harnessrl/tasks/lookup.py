"""The lookup suite: where is something defined, or what value does it have?

Sized for a tiny model trained from scratch: small repos, a one-line question, two tools, and an
expert that needs one grep and a short answer, so a whole conversation is ~100-200 tokens of a
1024-entry BPE. Questions ask for a constant's value, or the file that defines a class or function;
identifiers are unique per repo, so each has exactly one right answer.
"""

from __future__ import annotations

import random
from pathlib import Path

from harnessrl.tasks.repogen import Repo, Symbol, generate_repo
from harnessrl.tasks.task import Check, Solution, Task, split_of

SUITE = "lookup"
TOOLS = ["grep", "read_file"]
FILES_PER_REPO = 6


def question(sym: Symbol) -> tuple[str, str]:
    """(instruction, expected answer) for one symbol."""
    if sym.kind == "const":
        return f"What is the value of {sym.name}?", str(sym.value)
    return f"Which file defines {'class' if sym.kind == 'class' else 'function'} {sym.name}?", sym.path


def repo_tasks(repo: Repo, repo_rel: str, split: str) -> list[Task]:
    tasks = []
    for sym in repo.symbols:
        instruction, expected = question(sym)
        tasks.append(
            Task(
                id=f"{SUITE}/{repo_rel.split('/')[-1]}/{sym.name}",
                suite=SUITE,
                split=split,  # type: ignore[arg-type]
                repo=repo_rel,
                instruction=instruction,
                tools=TOOLS,
                check=Check(kind="answer", answer=expected),
                solution=Solution(kind={"const": "value"}.get(sym.kind, sym.kind), name=sym.name, path=sym.path),
            )
        )
    return tasks


def generate(
    rng: random.Random, num_repos: int, files_per_repo: int, annotated: bool = False, prefix: str = "r"
) -> list[tuple[str, Repo, list[Task]]]:
    """(snapshot dir relative to the suite dir, repo, its tasks) for every repo, in order."""
    out = []
    for i in range(num_repos):
        split = split_of(i, num_repos)
        rel = f"repos/{split}/{prefix}{i:04d}"
        repo = generate_repo(rng, files_per_repo, annotated=annotated)
        out.append((rel, repo, repo_tasks(repo, rel, split)))
    return out


def build(out: Path, seed: int, num: int) -> list[Task]:
    """`num` tasks, a quarter held out (from their own repos); only repos some task uses are written."""
    rng = random.Random(f"{SUITE}-{seed}")  # suites built with one seed still differ
    per_repo = FILES_PER_REPO * 5  # about 3 constants, 1.5 functions and a class per file
    repos = generate(rng, max(2, -(-num // per_repo) + 1), FILES_PER_REPO)
    return choose(rng, out, repos, [t for _, _, ts in repos for t in ts], num)


def choose(
    rng: random.Random, out: Path, repos: list[tuple[str, Repo, list[Task]]], tasks: list[Task], num: int
) -> list[Task]:
    """`num` of `tasks`, a quarter (at least one) from held-out repos, and the repos they use written
    under `out`: how the generated suites' builds end."""
    pools = {s: [t for t in tasks if t.split == s] for s in ("train", "heldout")}
    n_held = min(max(1, num // 4), len(pools["heldout"]))
    chosen = take(rng, pools["train"], num - n_held) + take(rng, pools["heldout"], n_held)
    used = {t.repo for t in chosen}
    for rel, repo, _ in repos:
        if rel in used:
            repo.write(out / rel)
    return chosen


def take(rng: random.Random, pool: list[Task], n: int) -> list[Task]:
    """n of the pool in pool order (at most all of it), chosen by rng."""
    keep = set(rng.sample(range(len(pool)), min(n, len(pool))))
    return [t for i, t in enumerate(pool) if i in keep]
