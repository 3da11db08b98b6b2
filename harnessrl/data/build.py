"""Build the recipe's data folder deterministically: same seed and code, same bytes.

Layout of `data/` (tracked by data.dvc):
  repos/<repo>/<pkg>/<module>.py   generated multi-file Python repos: the CPT code corpus
  sft.jsonl                        tool-call conversations (chat messages) for SFT
  prompts.jsonl                    RL prompts: lookup questions with their expected answer
  heldout.jsonl                    held-out eval prompts, from repos RL never sees

A lookup question asks for the value of a constant defined somewhere in a repo. The expert finds
it with one `grep` call and answers with the value. The harness issue replaces these conversations
with trajectories of the expert policy run in the real harness.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from harnessrl.config import DataConfig
from harnessrl.io import atomic_dir

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

SYSTEM_PROMPT = "You are a coding agent. Use tools to inspect the repository, then answer."


@dataclass(frozen=True)
class Constant:
    name: str
    value: int
    path: str  # relative to the repo root
    line: int


def _ident(rng: random.Random, n: int = 2) -> str:
    return "_".join(rng.choice(WORDS) for _ in range(n))


def _module(rng: random.Random, used: set[str]) -> tuple[list[str], list[tuple[str, int, int]]]:
    """One Python module: constants, functions and a class. Returns lines and (name, value, line)."""
    lines = [f'"""{rng.choice(WORDS).title()} {rng.choice(WORDS)} utilities."""', ""]
    consts = []
    for _ in range(rng.randint(2, 4)):
        name = _ident(rng).upper()
        while name in used:
            name = _ident(rng, 3).upper()
        used.add(name)
        value = rng.randint(2, 999)
        lines.append(f"{name} = {value}")
        consts.append((name, value, len(lines)))
    lines.append("")
    for _ in range(rng.randint(1, 3)):
        fn, a, b = _ident(rng), rng.choice(WORDS), rng.choice(WORDS) + "_n"
        op = rng.choice(["+", "-", "*", "//", "%"])
        lines += [
            "",
            f"def {fn}({a}: int, {b}: int = 1) -> int:",
            f'    """Combine {a} with {b}."""',
            f"    if {b} == 0:",
            f"        return {a}",
            f"    return {a} {op} {b}",
            "",
        ]
    cls = "".join(w.title() for w in _ident(rng).split("_"))
    attr = rng.choice(WORDS)
    lines += [
        "",
        f"class {cls}:",
        f"    def __init__(self, {attr}: int) -> None:",
        f"        self.{attr} = {attr}",
        "",
        "    def scaled(self, k: int) -> int:",
        f"        return self.{attr} * k",
        "",
    ]
    return lines, consts


def _repo(rng: random.Random, root: Path, files: int) -> list[Constant]:
    pkg = rng.choice(WORDS) + "_" + rng.choice(WORDS)
    (root / pkg).mkdir(parents=True)
    (root / pkg / "__init__.py").write_text("")
    used: set[str] = set()
    consts = []
    for _ in range(files):
        mod = _ident(rng)
        path = root / pkg / f"{mod}.py"
        if path.exists():
            continue
        lines, cs = _module(rng, used)
        path.write_text("\n".join(lines) + "\n")
        consts += [Constant(n, v, f"{pkg}/{mod}.py", ln) for n, v, ln in cs]
    return consts


def lookup_prompt(repo: str, const: Constant) -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"In repo {repo}, what is the value of {const.name}?"},
    ]


def expert_conversation(repo: str, const: Constant) -> list[dict]:
    """What a good agent does: one grep for the definition, then the value as the answer."""
    call = {"name": "grep", "arguments": {"pattern": f"^{const.name} ="}}
    hit = f"{const.path}:{const.line}:{const.name} = {const.value}"
    return [
        *lookup_prompt(repo, const),
        {"role": "assistant", "content": f"<tool_call>{json.dumps(call)}</tool_call>"},
        {"role": "tool", "content": hit},
        {"role": "assistant", "content": str(const.value)},
    ]


def build(cfg: DataConfig, out: Path) -> Path:
    """Write the data folder atomically: a killed build never leaves a half-written `out`."""
    rng = random.Random(cfg.seed)
    with atomic_dir(out) as tmp:
        consts: dict[str, list[Constant]] = {}
        for i in range(cfg.num_repos):
            name = f"repo_{i:04d}"
            consts[name] = _repo(rng, tmp / "repos" / name, cfg.files_per_repo)
        # Held-out prompts come from the last quarter of the repos, which SFT and RL never see.
        split = max(1, cfg.num_repos - max(1, cfg.num_repos // 4))
        train = [(r, c) for r in sorted(consts)[:split] for c in consts[r]]
        held = [(r, c) for r in sorted(consts)[split:] for c in consts[r]]
        _jsonl(tmp / "sft.jsonl", [{"messages": expert_conversation(r, c)} for r, c in _take(rng, train, cfg.num_sft)])
        _jsonl(tmp / "prompts.jsonl", [_task(r, c) for r, c in _take(rng, train, cfg.num_prompts)])
        _jsonl(tmp / "heldout.jsonl", [_task(r, c) for r, c in _take(rng, held, cfg.num_heldout)])
    return out


def _task(repo: str, c: Constant) -> dict:
    return {"repo": repo, "messages": lookup_prompt(repo, c), "answer": str(c.value), "name": c.name, "path": c.path}


def _take(rng: random.Random, pool: list, n: int) -> list:
    """n items, cycling through a shuffled pool when it is smaller than n."""
    order = pool[:]
    rng.shuffle(order)
    return [order[i % len(order)] for i in range(n)]


def _jsonl(path: Path, rows: list[dict]) -> None:
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")


def read_jsonl(path: Path | str) -> list[dict]:
    with Path(path).open() as f:
        return [json.loads(line) for line in f if line.strip()]


def corpus_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "repos").rglob("*.py"))
