"""Probing: call a repo's functions with small literal arguments, in the sandbox, and record what they
return. This is how bugfix and edit tasks get their tests without anyone writing them: the original
code's answers become the assertions, and a mutant is kept only if some probed answer changes.

Arguments have the types the code expects, so a test reads like one a person would write: each
parameter's type comes from its annotation, else from the literal arguments the repo itself passes
(call sites, doctest lines), which are tried first. A function with a required parameter of unknown
type is not probed at all: `parseaddr(0)` asserts nothing anyone wants.

Only plain, deterministic answers are kept: the call returns the same value twice, and the value's
repr reads back (ast.literal_eval) as an equal value, so it can be written into a test as a literal.
Calls that raise, time out or return anything else are left out of the tests.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from harnessrl.harness.sandbox import PYTHON, SANDBOX_ROOT
from harnessrl.tasks.checkers import RUNNER, WORKSPACE_IMPORTS, check_sandbox, python_command

MARK = "@@probe@@"
_PROBE = """
import ast
import json
import signal  # after the workspace finder: these are stdlib, never the workspace's


def _alarm(*_):
    raise TimeoutError


signal.signal(signal.SIGALRM, _alarm)


def _call(mod, fn, args):
    f = getattr(mod, fn, None)
    if not callable(f):
        return {"skip": "missing"}
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        first = f(*ast.literal_eval("(" + args + ",)"))
        second = f(*ast.literal_eval("(" + args + ",)"))
    except TimeoutError:
        return {"timeout": True}
    except BaseException as e:
        return {"raises": type(e).__name__}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        text = repr(first)
        plain = len(text) <= 200 and ast.literal_eval(text) == first and first == second and repr(second) == text
    except BaseException:
        plain = False
    return {"ret": text} if plain else {"skip": "not a plain value"}


out = {}
for name, calls in json.load(open("spec.json")).items():
    try:
        mod = importlib.import_module(name)
    except BaseException as e:
        out[name] = {"error": type(e).__name__ + ": " + str(e)[:200]}
        continue
    out[name] = {"calls": [_call(mod, fn, args) for fn, args in calls]}
print("\\n@@probe@@" + json.dumps(out))
"""

INTS = [-3, 0, 1, 2, 5, 9, 17, 100]
STRS = ["", "a", "abc", "Hello, World", " x y ", "a-b_c"]
LISTS = [[], [1, 2, 3], [3, 1, 2], ["a", "b"]]
FLOATS = [0.0, 0.5, 2.5, -1.25]
POOLS = {"int": INTS, "str": STRS, "list": LISTS, "float": FLOATS, "bool": [True, False]}


@dataclass(frozen=True)
class Function:
    module: str  # importable name, e.g. "pkg.sub.mod"
    path: str  # relative to the repo root
    name: str
    params: tuple[str, ...]  # annotation of each positional parameter ("" when none)
    required: int
    lines: tuple[int, int]  # first and last line of the def, 1-based
    examples: tuple[str, ...] = ()  # argument lists the repo passes it as literals (call sites, doctests)


def module_of(path: str) -> str:
    """The importable name of a repo's .py file: `pkg/sub/mod.py` -> `pkg.sub.mod`, a package's
    `__init__.py` its package."""
    return path[:-3].replace("/", ".").removesuffix(".__init__")


def find_functions(root: Path, path: str) -> list[Function]:
    """Top-level, undecorated functions taking 1-4 positional parameters and nothing required besides."""
    try:
        tree = ast.parse((root / path).read_text())
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    module = module_of(path)
    found = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.decorator_list or node.name.startswith("__"):
            continue
        a = node.args
        positional = a.posonlyargs + a.args
        required = len(positional) - len(a.defaults)
        if not 1 <= len(positional) <= 4 or required < 1 or any(d is None for d in a.kw_defaults):
            continue
        params = tuple(ast.unparse(p.annotation).split("[")[0] if p.annotation else "" for p in positional)
        found.append(Function(module, path, node.name, params, required, (node.lineno, node.end_lineno or node.lineno)))
    return found


def param_types(fn: Function) -> list[str]:
    """Each positional parameter's type, a key of POOLS: its annotation, else the one type of every
    literal the repo passes there; "" where neither says."""
    examples = [ast.literal_eval(f"({ex},)") for ex in fn.examples]
    types = []
    for i, annotation in enumerate(fn.params):
        seen = {type(args[i]).__name__ for args in examples if len(args) > i}
        found = annotation if annotation in POOLS else (seen.pop() if len(seen) == 1 else "")
        types.append(found if found in POOLS else "")
    return types


def _arity(args: str) -> int:
    return len(ast.literal_eval(f"({args},)")) if args else 0


def arg_sets(fn: Function, rng: random.Random, n: int = 10) -> list[str]:
    """Up to n distinct argument lists, as the source text inside the call's parentheses: the repo's own
    first, then drawn from each parameter's type; none where a required parameter's type is unknown."""
    out = [ex for ex in fn.examples if fn.required <= _arity(ex)][:n]
    types = param_types(fn)
    known = next((i for i, t in enumerate(types) if not t), len(types))  # parameters of known type, in order
    if known < fn.required:
        return out
    for _ in range(4 * n):
        if len(out) >= n:
            break
        top = min(known, 3)
        arity = rng.randint(fn.required, top if top > fn.required else fn.required)
        text = ", ".join(repr(rng.choice(POOLS[types[i]])) for i in range(arity))
        if text not in out:
            out.append(text)
    return out


Calls = dict[str, list[tuple[str, str]]]  # module -> [(function, args)]


def probe(
    repo_dir: Path, packages: list[str], calls: Calls, timeout_s: float = 60.0, python: str = PYTHON
) -> dict[str, dict]:
    """Run the calls against the repo in the sandbox with `python` (a source's environment's, where it
    has one): module -> {"calls": [result per call]} or {"error"}."""
    script = WORKSPACE_IMPORTS.format(packages=sorted(packages), root="/workspace") + _PROBE
    files = {"spec.json": json.dumps(calls), "probe.py": script}
    res = check_sandbox(repo_dir, timeout_s, python).run(python_command(files, ["probe.py"], python))
    if MARK not in res.output:
        return {m: {"error": f"probe failed (exit {res.exit_code}): {res.output[-300:]}"} for m in calls}
    try:
        return json.loads(res.output.rsplit(MARK, 1)[1].strip().splitlines()[0])
    except (json.JSONDecodeError, IndexError):  # the output was cut short: a function printed too much
        return {m: {"error": f"probe output unreadable (exit {res.exit_code})"} for m in calls}


def returns(result: dict, calls: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(function, args, repr of the return value) for the calls of one module that returned plainly."""
    return [(fn, args, r["ret"]) for (fn, args), r in zip(calls, result.get("calls", []), strict=False) if "ret" in r]


def assertions(alias: str, rows: list[tuple[str, str, str]]) -> list[str]:
    return [f"    assert {alias}{fn}({args}) == {ret}" for fn, args, ret in rows]


def probe_functions(
    repo_dir: Path,
    packages: list[str],
    functions: list[Function],
    rng: random.Random,
    n: int = 10,
    python: str = PYTHON,
) -> dict[str, list[tuple[str, str, str]]]:
    """Probe every function with n argument lists: module -> its plain (function, args, repr) answers.
    Modules that fail to import are left out."""
    calls: Calls = {}
    for fn in functions:
        calls.setdefault(fn.module, []).extend((fn.name, a) for a in arg_sets(fn, rng, n))
    results = probe(repo_dir, packages, calls, python=python)
    rows = {m: returns(results[m], calls[m]) for m in calls if "calls" in results.get(m, {})}
    return holding(repo_dir, packages, rows, python)


def holding(
    repo_dir: Path, packages: list[str], rows: dict[str, list[tuple[str, str, str]]], python: str = PYTHON
) -> dict[str, list[tuple[str, str, str]]]:
    """The rows that hold when asserted as a check asserts them: a function whose answer depends on
    who calls it (a stack-frame lookup, the caller's file) answered the probe one way and would answer
    the check another, failing every task that asserts it. One sandboxed run of all rows decides."""
    flat = [(m, row) for m, rs in sorted(rows.items()) for row in rs]
    if not flat:
        return rows
    test = "import importlib\n"
    for i, (m, row) in enumerate(flat):
        test += f"\n\ndef test_{i}():\n    m = importlib.import_module({m!r})\n" + "\n".join(assertions("m.", [row]))
    imports = WORKSPACE_IMPORTS.format(packages=sorted(packages), root=SANDBOX_ROOT)
    files = {"test_check.py": test + "\n", "run_check.py": imports + RUNNER, "nonce": "probe"}
    res = check_sandbox(repo_dir, 120.0, python).run(python_command(files, ["run_check.py"], python))
    if "== " not in res.output:  # the run itself failed (a timeout, a crash): trust no row
        return {}
    failed = {int(i) for i in re.findall(r"^FAILED test_(\d+)$", res.output, re.MULTILINE)}
    kept: dict[str, list[tuple[str, str, str]]] = {}
    for i, (m, row) in enumerate(flat):
        if i not in failed:
            kept.setdefault(m, []).append(row)
    return kept


def repo_functions(repo_dir: Path) -> list[Function]:
    paths = [p.relative_to(repo_dir).as_posix() for p in sorted(repo_dir.rglob("*.py"))]
    functions = [f for path in paths for f in find_functions(repo_dir, path)]
    examples = literal_calls(repo_dir, paths)
    return [dataclasses.replace(f, examples=tuple(examples.get((f.module, f.name), []))) for f in functions]


MAX_EXAMPLES = 8  # literal argument lists kept per function
MAX_EXAMPLE_CHARS = 200


def _imported(module: str, is_package: bool, tree: ast.Module) -> dict[str, tuple[str, str]]:
    """Names a module imports from modules of its own repo: local name -> (module, name there)."""
    found = {}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        origin = node.module or ""
        if node.level:  # relative: from the module's package, `level - 1` packages up
            package = module.split(".") if is_package else module.split(".")[:-1]
            origin = ".".join([*package[: len(package) - node.level + 1], *([node.module] if node.module else [])])
        for a in node.names:
            found[a.asname or a.name] = (origin, a.name)
    return found


def literal_calls(repo_dir: Path, paths: list[str]) -> dict[tuple[str, str], list[str]]:
    """(module, function) -> the argument lists (source text) of the repo's calls to it whose positional
    arguments are all literals: by its name in its own module or where it is imported by name, and in
    doctest lines (`>>> f(...)`, `>>> mod.f(...)`) of its own module. A method call of the same name
    (`s.decode('ascii')`) is another function's, and never counts."""
    found: dict[tuple[str, str], list[str]] = {}

    def visit(tree: ast.AST, resolve: dict[str, tuple[str, str]], attributes: bool) -> None:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or node.keywords or not node.args:
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if attributes and isinstance(node.func, ast.Attribute):
                name = node.func.attr
            if name not in resolve or any(isinstance(a, ast.Starred) for a in node.args):
                continue
            try:
                [ast.literal_eval(a) for a in node.args]
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            text = ", ".join(ast.unparse(a) for a in node.args)
            if len(text) > MAX_EXAMPLE_CHARS:  # a test asserts it verbatim: no pages of data
                continue
            seen = found.setdefault(resolve[name], [])
            if text not in seen and len(seen) < MAX_EXAMPLES:
                seen.append(text)

    for path in paths:
        try:
            tree = ast.parse((repo_dir / path).read_text())
        except (SyntaxError, UnicodeDecodeError, ValueError, RecursionError, MemoryError):
            continue
        module = module_of(path)
        own = {n.name: (module, n.name) for n in tree.body if isinstance(n, ast.FunctionDef)}
        visit(tree, {**_imported(module, path.endswith("__init__.py"), tree), **own}, attributes=False)
        for node in ast.walk(tree):  # doctests of this module's own functions
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ">>>" in node.value:
                for line in re.findall(r"^\s*>>> (.+)$", node.value, re.MULTILINE):
                    try:
                        visit(ast.parse(line.strip(), mode="eval"), own, attributes=True)
                    except (SyntaxError, ValueError, RecursionError, MemoryError):
                        continue
    return found
