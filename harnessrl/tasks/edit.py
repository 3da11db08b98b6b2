"""The edit suite: rename a function everywhere, change a constant, add a parameter with a default.

Checks run code. The original repo's functions are probed in the sandbox at build time; the hidden
test imports every module and asserts the requested change plus every probed answer, so a missed call
site (an ImportError, a NameError when the caller runs) or a behaviour change fails the check.
Constant changes sometimes leave the value out of the instruction: the agent must ask the user.
"""

from __future__ import annotations

import ast
import keyword
import random
import re
from pathlib import Path

from harnessrl.tasks.probe import assertions, module_of, probe_functions, repo_functions
from harnessrl.tasks.repogen import Repo, Symbol, generate_repo
from harnessrl.tasks.task import Check, Solution, Task, split_of

SUITE = "edit"
TOOLS = ["grep", "read_file", "edit_file", "run_terminal", "finish"]
FILES_PER_REPO = 4
PARAM = "offset"

Rows = dict[str, list[tuple[str, str, str]]]  # module -> (function, args, repr of the answer)


IDENTIFIERS = """\
def identifiers(path):  # every name a module defines, uses, imports or reads as an attribute
    import ast

    with open("/workspace/" + path) as f:
        tree = ast.parse(f.read())
    found = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            found.add(n.id)
        elif isinstance(n, ast.Attribute):
            found.add(n.attr)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(n.name)
        elif isinstance(n, ast.alias):
            found.update([n.name.split(".")[-1], n.asname or ""])
    return found
"""


def _test(repo: Repo, rows: Rows, extra: list[str], rename: tuple[str, str] | None = None) -> str:
    """A hidden pytest file: every module imports, `extra` holds, and every probed answer still holds."""
    lines = ["import importlib", "import inspect  # noqa: F401", "", ""]
    lines += [*IDENTIFIERS.splitlines(), "", ""] if rename else []
    lines += ["def test_modules_import():"]
    lines += [f"    importlib.import_module({m!r})" for m in repo.modules()]
    lines += ["", "", "def test_requested_change():", *extra]
    for i, (module, answers) in enumerate(sorted(rows.items())):
        if rename:
            answers = [(rename[1] if fn == rename[0] else fn, a, r) for fn, a, r in answers]
        lines += ["", "", f"def test_behaviour_{i}():", f"    m = importlib.import_module({module!r})"]
        lines += assertions("m.", answers)
    return "\n".join(lines) + "\n"


def rename_task(
    rng: random.Random, repo: Repo, rows: Rows, rel: str, split: str, names: set[str], fn: Symbol, packages: list[str]
) -> Task:
    """Rename `fn` to a new name everywhere: every module must still import and behave."""
    new = new_name(rng, fn.name, repo, names)
    mod = module_of(fn.path)
    paths = sorted(p for p in repo.files if p.endswith(".py"))
    extra = [
        f"    m = importlib.import_module({mod!r})",
        f"    assert not hasattr(m, {fn.name!r})",
        f"    assert callable(m.{new})",
        # Every use renamed, not only the def: a caller no probe reaches would still name the old one.
        f"    for path in {paths!r}:",
        f"        assert {fn.name!r} not in identifiers(path), path",
    ]
    return Task(
        id=f"{SUITE}/{rel.split('/')[-1]}/rename",
        suite=SUITE,
        split=split,  # type: ignore[arg-type]
        repo=rel,
        instruction=f"Rename the function {fn.name} to {new} everywhere in the repository.",
        tools=TOOLS,
        check=Check(kind="tests", test=_test(repo, rows, extra, (fn.name, new)), packages=packages),
        solution=Solution(kind="rename", name=fn.name, new_name=new, path=fn.path),
    )


def constant_task(
    rng: random.Random, repo: Repo, rows: Rows, rel: str, split: str, const: Symbol, packages: list[str]
) -> Task:
    """Change an integer constant; half the time the instruction leaves the value to the user."""
    value = rng.choice([v for v in range(2, 1000) if v != const.value])
    extra = [f"    m = importlib.import_module({module_of(const.path)!r})", f"    assert m.{const.name} == {value}"]
    ask = rng.random() < 0.5
    return Task(
        id=f"{SUITE}/{rel.split('/')[-1]}/constant",
        suite=SUITE,
        split=split,  # type: ignore[arg-type]
        repo=rel,
        instruction=f"Change {const.name} to the value the user wants; ask them."
        if ask
        else f"Change the value of {const.name} to {value}.",
        tools=[*TOOLS[:-1], "ask_user", "finish"] if ask else TOOLS,
        user=f"Set it to {value}." if ask else None,
        check=Check(kind="tests", test=_test(repo, rows, extra), packages=packages),
        solution=Solution(kind="constant", name=const.name, value=str(value), path=const.path),
    )


def repo_tasks(rng: random.Random, repo: Repo, rows: Rows, rel: str, split: str, names: set[str]) -> list[Task]:
    # Rename: prefer a function some other module imports, so more than one file must change.
    functions = repo.of_kind("function")
    used = {s.uses for s in functions if s.uses}
    fn = rng.choice([f for f in functions if f.name in used] or functions)
    tasks = [rename_task(rng, repo, rows, rel, split, names, fn, [repo.package])]
    tasks.append(constant_task(rng, repo, rows, rel, split, rng.choice(repo.of_kind("const")), [repo.package]))

    # Parameter: the new parameter's default keeps every old answer; passing it shifts the result.
    tasks.append(param_task(repo, rows, rel, split, rng.choice(functions), [repo.package]))
    return tasks


def param_task(
    repo: Repo, rows: Rows, rel: str, split: str, fn: Symbol, packages: list[str], example: str | None = None
) -> Task:
    """Add `offset: int = 0` to `fn`, returning its old result plus offset: the default keeps every
    probed answer, and passing it shifts them. `example` is arguments the expert tries it with."""
    mod = module_of(fn.path)
    extra = [
        f"    m = importlib.import_module({mod!r})",
        f"    assert inspect.signature(m.{fn.name}).parameters[{PARAM!r}].default == 0",
    ]
    shifted = [(a, r) for f, a, r in rows.get(mod, []) if f == fn.name and is_int(r)]
    extra += [f"    assert m.{fn.name}({a}, {PARAM}=7) == {r} + 7" for a, r in shifted[:4]]
    return Task(
        id=f"{SUITE}/{rel.split('/')[-1]}/param",
        suite=SUITE,
        split=split,  # type: ignore[arg-type]
        repo=rel,
        instruction=f"Add a keyword parameter `{PARAM}: int = 0` to the function {fn.name}; "
        f"it must return its old result plus {PARAM}.",
        tools=TOOLS,
        check=Check(kind="tests", test=_test(repo, rows, extra), packages=packages),
        solution=Solution(kind="param", name=fn.name, param=PARAM, path=fn.path, value=example),
    )


def is_int(text: str) -> bool:
    """Whether a probed answer (its repr) is an int, the kind of result the offset can be added to."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return False
    return isinstance(value, int) and not isinstance(value, bool)


# A rename a person asks for: the name's verb swapped for another that says the same, else the name
# made private (or public). The repo's own words, never a made-up name.
SYNONYMS = {
    "get": "fetch", "fetch": "get", "set": "assign", "parse": "read", "read": "load", "load": "read",
    "make": "build", "build": "make", "create": "make", "format": "render", "render": "format",
    "check": "verify", "verify": "check", "find": "locate", "compute": "calculate", "update": "refresh",
    "write": "save", "save": "write", "add": "append", "remove": "delete", "delete": "remove",
    "encode": "serialize", "split": "divide", "join": "merge", "convert": "transform", "handle": "process",
}  # fmt: skip


def new_name(rng: random.Random, old: str, repo: Repo, names: set[str]) -> str:
    """The name `old` is renamed to: its leading verb's synonym, else the name made private (public for a
    private one); one no file of the repo already uses. A made-up name only where neither is free."""
    bare = old.lstrip("_")
    under = old[: len(old) - len(bare)]
    verb, sep, rest = bare.partition("_")
    candidates = [f"{under}{SYNONYMS[verb]}{sep}{rest}"] if verb in SYNONYMS else []
    candidates.append(bare if under == "_" else f"_{old}")
    for name in candidates:
        taken = name in names or keyword.iskeyword(name) or not name.isidentifier()
        if not taken and not any(re.search(rf"\b{name}\b", text) for text in repo.files.values()):
            names.add(name)
            return name
    while True:
        name = f"{rng.choice(['compute', 'apply', 'resolve', 'derive'])}_{rng.choice(['total', 'value', 'step'])}"
        name += f"_{rng.randint(0, 99)}"
        if name not in names:
            names.add(name)
            return name


def build(out: Path, seed: int, num: int) -> list[Task]:
    """Three tasks (rename, constant, param) per generated repo; a quarter of the repos held out."""
    rng = random.Random(f"{SUITE}-{seed}")  # suites built with one seed still differ
    num_repos = max(2, -(-num // 3))
    tasks: list[Task] = []
    for i in range(num_repos):
        split = split_of(i, num_repos)
        rel = f"repos/{split}/r{i:04d}"
        repo = generate_repo(rng, FILES_PER_REPO, max_consts=3)
        repo.write(out / rel)
        rows = probe_functions(out / rel, [repo.package], repo_functions(out / rel), rng, n=4)
        tasks += repo_tasks(rng, repo, rows, rel, split, {s.name for s in repo.symbols})
    train = [t for t in tasks if t.split == "train"]
    held = [t for t in tasks if t.split == "heldout"]
    n_held = min(max(1, num // 4), len(held))
    return train[: num - n_held] + held[:n_held]
