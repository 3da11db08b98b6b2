"""Generated multi-file Python repos: the code every generated suite (and the CPT corpus) is made of.

A repo is one package of small modules. Each module has integer constants, a few int -> int functions
from templates (combine, clamp, accumulate) and a class; later modules may import a function from an
earlier one and call it, so renaming a function means editing more than one file. Every identifier
is unique within a repo, so "where is X defined" has exactly one answer. Everything is generated in
memory first and written in sorted order, so the same rng state gives the same bytes.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from harnessrl.tasks.task import Task

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "cache",
    "queue",
    "token",
    "parser",
    "buffer",
    "frame",
    "packet",
    "router",
    "index",
    "table",
    "vector",
    "matrix",
    "graph",
    "node",
    "edge",
    "stream",
    "batch",
    "shard",
    "replica",
    "lease",
    "window",
    "budget",
    "score",
    "limit",
    "retry",
    "timeout",
    "worker",
    "config",
    "engine",
    "loader",
    "writer",
    "reader",
    "sink",
    "source",
    "filter",
    "mapper",
    "reducer",
]


@dataclass(frozen=True)
class Symbol:
    kind: Literal["const", "function", "class"]
    name: str
    path: str  # relative to the repo root
    line: int  # 1-based line of the definition
    value: int | float | str | None = None  # constants only (generated ones are ints)
    template: str | None = None  # functions only: combine, clamp, accumulate, caller
    uses: str | None = None  # callers only: the imported function they call


@dataclass
class Repo:
    package: str
    files: dict[str, str] = field(default_factory=dict)  # path -> text
    symbols: list[Symbol] = field(default_factory=list)

    def find(self, name: str) -> Symbol:
        return next(s for s in self.symbols if s.name == name)

    def of_kind(self, kind: str) -> list[Symbol]:
        return [s for s in self.symbols if s.kind == kind]

    def modules(self) -> list[str]:
        """Importable module names, e.g. "alpha_beta.cache_node"."""
        return [p[:-3].replace("/", ".") for p in sorted(self.files) if p.endswith(".py") and "__init__" not in p]

    def write(self, root: Path) -> None:
        for rel in sorted(self.files):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(self.files[rel])


class _Names:
    """Fresh identifiers from WORDS, none used twice in one repo."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.used = rng, set(WORDS)

    def __call__(self, n: int = 2, upper: bool = False) -> str:
        while True:
            name = "_".join(self.rng.choice(WORDS) for _ in range(n))
            name = name.upper() if upper else name
            if name.lower() not in self.used:
                self.used.add(name.lower())
                return name
            n = 3 if n == 2 else n


def _function(rng: random.Random, fn: str, template: str, callee: str | None) -> list[str]:
    a, b = rng.choice(WORDS), rng.choice(WORDS) + "_n"
    k = rng.randint(2, 9)
    if template == "combine":
        op = rng.choice(["+", "-", "*", "//", "%"])
        return [
            f"def {fn}({a}: int, {b}: int = 1) -> int:",
            f'    """Combine {a} with {b}."""',
            f"    if {b} == 0:",
            f"        return {a}",
            f"    return {a} {op} {b}",
        ]
    if template == "clamp":
        return [
            f"def {fn}({a}: int, low: int = 0, high: int = {k * 10}) -> int:",
            f'    """Clamp {a} to [low, high]."""',
            f"    if {a} < low:",
            "        return low",
            f"    if {a} > high:",
            "        return high",
            f"    return {a}",
        ]
    if template == "accumulate":
        return [
            f"def {fn}(count: int) -> int:",
            f'    """Sum of i * {k} for i from 1 to count."""',
            "    total = 0",
            "    for i in range(1, count + 1):",
            f"        total += i * {k}",
            "    return total",
        ]
    return [  # caller: uses a function imported from an earlier module
        f"def {fn}({a}: int) -> int:",
        f'    """{callee} of {a}, plus {k}."""',
        f"    return {callee}({a}) + {k}",
    ]


def generate_repo(rng: random.Random, num_files: int, max_consts: int = 4, annotated: bool = False) -> Repo:
    """A repo of `num_files` modules; `annotated` writes each constant with a type (`NAME: int = 7`)."""
    names = _Names(rng)
    repo = Repo(package=names())
    repo.files[f"{repo.package}/__init__.py"] = ""
    for i in range(num_files):
        mod = names()
        path = f"{repo.package}/{mod}.py"
        earlier = [s for s in repo.symbols if s.kind == "function" and s.template != "caller"]
        callee = rng.choice(earlier) if earlier and i % 2 == 1 else None
        lines = [f'"""{rng.choice(WORDS).title()} {rng.choice(WORDS)} utilities."""', ""]
        if callee:
            lines += [f"from {callee.path[:-3].replace('/', '.')} import {callee.name}", ""]
        for _ in range(rng.randint(2, max_consts)):
            name, value = names(upper=True), rng.randint(2, 999)
            lines.append(f"{name}: int = {value}" if annotated else f"{name} = {value}")
            repo.symbols.append(Symbol("const", name, path, len(lines), value=value))
        templates = [rng.choice(["combine", "clamp", "accumulate"]) for _ in range(rng.randint(1, 2))]
        if callee:
            templates.append("caller")
        for template in templates:
            fn = names()
            lines += ["", ""]
            repo.symbols.append(
                Symbol(
                    "function",
                    fn,
                    path,
                    len(lines) + 1,
                    template=template,
                    uses=callee.name if template == "caller" else None,
                )
            )
            lines += _function(rng, fn, template, callee.name if callee else None)
        cls = "".join(w.title() for w in names().split("_"))
        attr = rng.choice(WORDS)
        lines += ["", ""]
        repo.symbols.append(Symbol("class", cls, path, len(lines) + 1))
        lines += [
            f"class {cls}:",
            f"    def __init__(self, {attr}: int) -> None:",
            f"        self.{attr} = {attr}",
            "",
            "    def scaled(self, k: int) -> int:",
            f"        return self.{attr} * k",
        ]
        repo.files[path] = "\n".join(lines) + "\n"
    return repo


def planted_tasks(
    rng: random.Random, out: Path, num: int, plant: Callable[[Path, Repo, str, str, int], list[Task]]
) -> list[Task]:
    """`num` tasks from generated repos of 3 files, a quarter held out by repo, for the suites that plant
    a change (bugfix, lint): each repo is written to out/.original/<split>-<i> and `plant(original,
    repo, split, prefix, want)` makes up to `want` tasks of it (at most two a repo; some give none)."""
    n_held = max(1, num // 4)
    tasks: list[Task] = []
    for split, total in (("train", num - n_held), ("heldout", n_held)):
        for i in range(4 * total):
            left = total - sum(t.split == split for t in tasks)
            if left <= 0:
                break
            repo = generate_repo(rng, 3)
            original = out / ".original" / f"{split}-{i}"
            repo.write(original)
            tasks += plant(original, repo, split, f"r{i:04d}", min(2, left))
    shutil.rmtree(out / ".original", ignore_errors=True)
    return tasks
