"""Per-source environments: a real repository's tests need its dependencies.

A source whose copy has `requirements*.txt` files (or else a `pyproject.toml` with
`[project].dependencies`, or else a `setup.py` whose install_requires is a literal list) at its root
gets an environment, built at data-build time through the package registry: a venv of
the harness's own Python (`python -m venv --without-pip`, filled by the harness's pip with
`--python`), with the source's requirements and pytest pinned to the harness's version (checks and
`run_tests` run pytest), never the project itself: the source's code comes from the workspace. A
source with no requirements file, or an empty dependency list, gets none and runs with the harness's
Python. Tasks of a source with an environment name it (`Task.env`, e.g. "envs/<source>"); episodes,
checks, probes and the terminal tools then run that environment's interpreter in the sandbox, its
folder bound read-only (harnessrl/harness/sandbox.py).

Where an environment lives. The data folder holds only what defines it, `envs/<source>/`:
    requirements.in   what was asked for (the source's requirements, plus pytest)
    lock.txt          what was got: `pip freeze` of the built environment (after the requirements'
                      index and find-links options); part of the data version
and `sources.json` records `env` = {path, python, lock_sha256, requirements}. The venv itself lives
in a cache keyed by the Python version and the lock's hash, `$HARNESSRL_ENV_CACHE/py<X.Y.Z>-<sha>/`
(default ~/.cache/harnessrl/envs), and is rebuilt from lock.txt (`pip install --no-deps`) wherever
it is missing. Not inside the data folder, because a venv is not relocatable (the console scripts'
shebangs and pyvenv.cfg hold absolute paths) while the data folder sits at a different absolute path
on every machine that pulls it; and because DVC would then version thousands of installed files
rather than one lock. The same lock gives the same environment anywhere: on a cluster, the data
step builds the cache on the shared volume (docs/cluster.md).

Building is atomic: a venv is built in a temporary folder beside its final place, its absolute paths
rewritten to the final ones, then renamed there; a builder that loses a race discards its own copy.
A failed build raises EnvError naming the source, its requirements file and pip's last lines.
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from harnessrl.harness.sandbox import PYTHON

ENV_FILES = ("requirements*.txt", "pyproject.toml", "setup.py")  # read from a source's root, whatever its include says
ENVS_DIR = "envs"
PIP_TAIL_LINES = 15


def is_env_file(rel: str) -> bool:
    """Whether a path (relative to a source's root) is one of the ENV_FILES: at the root, by name."""
    return "/" not in rel and any(fnmatch.fnmatch(rel, pattern) for pattern in ENV_FILES)


class EnvError(RuntimeError):
    """An environment cannot be built: the message names the source, its requirements file and pip's output."""


@dataclass(frozen=True)
class EnvInfo:
    """What `sources.json` records of a source's environment."""

    path: str  # its folder in the data folder, e.g. "envs/<source>"; Task.env names it
    python: str  # the Python version it was built with
    lock_sha256: str  # of lock.txt
    requirements: str  # the file of the source it was built from


def cache_root() -> Path:
    """Where built environments live: $HARNESSRL_ENV_CACHE, default ~/.cache/harnessrl/envs."""
    return Path(os.environ.get("HARNESSRL_ENV_CACHE") or Path.home() / ".cache" / "harnessrl" / "envs")


def _requirement_lines(text: str) -> list[str]:
    """A requirements file's requirements: comments, editable and local-path lines and includes (-r, -c:
    their files are read on their own) left out; the project itself is never installed."""
    lines = [line.split(" #")[0].strip() for line in text.splitlines()]
    skip = ("#", "-e", "--editable", ".", "-r", "-c", "--requirement", "--constraint")
    return [x for x in lines if x and not x.startswith(skip)]


def _setup_py_requires(path: Path) -> list[str]:
    """install_requires and tests_require of setup.py's `setup(...)` call, where they are literal lists of
    strings (the file is parsed, never run); EnvError where setup() computes them."""
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError as e:
        raise EnvError(f"{path}: not valid Python: {e}") from None
    found: list[str] = []
    for node in ast.walk(tree):
        name = getattr(node, "func", None)
        name = getattr(name, "id", None) or getattr(name, "attr", None)
        if not isinstance(node, ast.Call) or name != "setup":
            continue
        for kw in node.keywords:
            if kw.arg in ("install_requires", "tests_require"):
                try:
                    value = ast.literal_eval(kw.value)
                except ValueError:
                    raise EnvError(f"{path}: setup({kw.arg}=...) is computed, not a list of strings") from None
                found += [str(v) for v in value]
    return found


def requirements_of(copy: Path) -> tuple[str, list[str]] | None:
    """(files, requirement lines) of a source's copy, the first of these it has: requirements*.txt at its
    root (all of them: a repository's tests often need requirements-dev.txt too), pyproject.toml's
    [project].dependencies, setup.py's install_requires and tests_require; None where it has none."""
    reqs = sorted(p for p in copy.glob("requirements*.txt") if p.is_file())
    if reqs:
        return ", ".join(p.name for p in reqs), [r for p in reqs for r in _requirement_lines(p.read_text())]
    pyproject = copy / "pyproject.toml"
    if pyproject.is_file():
        try:
            project = tomllib.loads(pyproject.read_text()).get("project", {})
        except tomllib.TOMLDecodeError as e:
            raise EnvError(f"{pyproject}: not valid TOML: {e}") from None
        return "pyproject.toml", [str(d) for d in project.get("dependencies", [])]
    if (copy / "setup.py").is_file():
        return "setup.py", _setup_py_requires(copy / "setup.py")
    return None


def _key(lock: str) -> str:
    return f"py{platform.python_version()}-{hashlib.sha256(lock.encode()).hexdigest()[:24]}"


def _pip(venv: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [PYTHON, "-m", "pip", "--python", str(venv / "bin" / "python"), "--disable-pip-version-check", *args]
    return subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)


def _relocate(venv: Path, old: str, new: str) -> None:
    """Rewrite the venv's absolute paths (script shebangs, activate, pyvenv.cfg) from `old` to `new`."""
    for p in [*(venv / "bin").iterdir(), venv / "pyvenv.cfg"]:
        if p.is_symlink() or not p.is_file():
            continue
        data = p.read_bytes()
        if old.encode() in data and b"\0" not in data[:4096]:
            p.write_bytes(data.replace(old.encode(), new.encode()))


def _build(
    what: str, install: list[str], lock: str | None = None, options: tuple[str, ...] | list[str] = ()
) -> tuple[Path, str]:
    """Build a venv with `pip install *install`, then move it to its place in the cache, keyed by its
    lock (given, or `options` and `pip freeze` of what was built). Returns (the venv, its lock)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        venv = tmp / "venv"
        made = subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True)
        if made.returncode != 0:
            raise EnvError(f"{what}: python -m venv failed: {made.stderr.strip()[-2000:]}")
        res = _pip(venv, "install", "--no-input", *install)
        if res.returncode != 0:
            tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-PIP_TAIL_LINES:])
            raise EnvError(f"{what}: pip install failed (exit {res.returncode}):\n{tail}")
        if lock is None:
            frozen = _pip(venv, "freeze")
            if frozen.returncode != 0:
                raise EnvError(f"{what}: pip freeze failed: {frozen.stderr.strip()[-2000:]}")
            pins = sorted(line for line in frozen.stdout.splitlines() if line.strip())
            lock = "".join(f"{line}\n" for line in [*options, *pins])
        final = root / _key(lock)
        _relocate(venv, str(venv), str(final))
        os.chmod(venv, 0o755)  # the sandbox's unprivileged uid reads it
        try:
            os.rename(venv, final)
        except OSError:
            if not (final / "bin" / "python").exists():
                raise
        return final, lock
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_env(name: str, copy: Path, data_dir: Path, say: Callable[[str], None] = lambda _: None) -> EnvInfo | None:
    """The environment of source `name` (its copy at `copy`), written to data_dir/envs/<name>/ and
    built into the cache; None for a source that needs only the standard library."""
    found = requirements_of(copy)
    if found is None or not found[1]:
        return None
    file, requirements = found
    rel = f"{ENVS_DIR}/{name}"
    wanted = "".join(f"{r}\n" for r in [*requirements, f"pytest=={version('pytest')}"])
    folder = data_dir / rel
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "requirements.in").write_text(wanted)
    what = f"source {name!r}: cannot build its environment from {file} ({copy / file})"
    # Where packages come from (--index-url, --find-links lines) is part of the lock, for its rebuilds.
    sources = ("--index-url", "--extra-index-url", "--no-index", "--find-links", "-i ", "-f ")
    options = [r for r in requirements if r.startswith(sources)]
    venv, lock = _build(what, ["-r", str(folder / "requirements.in")], options=options)
    (folder / "lock.txt").write_text(lock)
    say(f"source {name}: environment {venv.name} from {file}: {len(lock.splitlines())} packages")
    return EnvInfo(rel, platform.python_version(), hashlib.sha256(lock.encode()).hexdigest(), file)


_building = threading.Lock()


def env_python(data_dir: Path | str, env: str) -> str:
    """The interpreter of the environment at data_dir/`env` (Task.env): the cached venv of its lock,
    built from lock.txt first where this machine has none."""
    lock_path = Path(data_dir) / env / "lock.txt"
    try:
        lock = lock_path.read_text()
    except OSError as e:
        raise EnvError(f"environment {env!r}: cannot read {lock_path}: {e.strerror}") from None
    with _building:  # episodes run in threads: one build per lock
        venv = cache_root() / _key(lock)
        if not (venv / "bin" / "python").exists():
            what = f"environment {env!r}: cannot rebuild it from {lock_path}"
            venv, _ = _build(what, ["--no-deps", "-r", str(lock_path)], lock)
    return str(venv / "bin" / "python")
