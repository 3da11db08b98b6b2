"""Per-source environments (harnessrl/sources/envs.py): a source with requirements gets a venv built from
them, its lock recorded in the data folder and sources.json, and its tasks, checks and probes run that
venv's Python in the sandbox; a stdlib-only source gets none.

The dependency is a tiny package whose wheel the test writes itself (a wheel is a zip), so it never
depends on what a registry holds; pytest, which every environment gets pinned to the harness's
version, comes from the package registry pip is configured with (data-build time needs it anyway)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from harnessrl.config import Budgets, SourceConfig
from harnessrl.harness.episode import AssistantTurn, run_task
from harnessrl.harness.sandbox import PYTHON, Sandbox
from harnessrl.sources.copies import SourceError, read_sources, write_sources
from harnessrl.sources.envs import EnvError, build_env, cache_root, env_python, requirements_of
from harnessrl.tasks.checkers import run_check
from harnessrl.tasks.expert import call, turn
from harnessrl.tasks.mine import mine_sources
from harnessrl.tasks.probe import probe
from harnessrl.tasks.task import Check, Solution, Task

DEP = "tinydep_hrl"


def make_wheel(folder: Path) -> Path:
    """A pure-Python wheel of DEP 0.1 (FACTOR = 3), written by hand."""
    files = {
        f"{DEP}/__init__.py": "FACTOR = 3\n",
        f"{DEP}-0.1.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {DEP}\nVersion: 0.1\n",
        f"{DEP}-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{DEP}-0.1.dist-info/RECORD"] = "\n".join([*record, f"{DEP}-0.1.dist-info/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{DEP}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


OPS = f'''"""Arithmetic that needs {DEP}."""

import {DEP}

LIMIT = 100
STEP = 7
OFFSET = 12


def scale(x: int) -> int:
    return {DEP}.FACTOR * x + 1


def clamp(x: int, hi: int) -> int:
    if x > hi:
        return hi
    return x - 1
'''


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A source needing DEP, mined into a data folder once; the env cache is the test's own."""
    root = tmp_path_factory.mktemp("envs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNESSRL_ENV_CACHE", str(root / "cache"))
        wheels = make_wheel(root / "wheels").parent
        src = root / "src"
        (src / "calc").mkdir(parents=True)
        (src / "calc" / "__init__.py").write_text("")
        (src / "calc" / "ops.py").write_text(OPS)
        (src / "requirements.txt").write_text(f"# what calc needs\n--find-links {wheels}\n{DEP}==0.1\n-e .\n")
        out = root / "data"
        out.mkdir()
        cfg = SourceConfig(name="calc", path=str(src), tasks={"bugfix": 1, "lint": 1, "lookup": 1})
        kept, _, infos, _ = mine_sources([cfg], 0, out, workers=1)
        write_sources(out, infos)
        yield {"root": root, "out": out, "tasks": kept["train"], "infos": infos, "wheels": wheels}


def test_lock_is_written_and_recorded(world):
    out = world["out"]
    (entry,) = read_sources(out)
    env = entry["env"]
    assert env["path"] == "envs/calc" and env["requirements"] == "requirements.txt"
    lock = (out / "envs/calc/lock.txt").read_text()
    assert f"{DEP}==0.1" in lock.splitlines() and any(line.startswith("pytest==") for line in lock.splitlines())
    assert env["lock_sha256"] == hashlib.sha256(lock.encode()).hexdigest()
    assert (out / "repos/train/calc/requirements.txt").is_file()  # copied though include is **/*.py
    wanted = (out / "envs/calc/requirements.in").read_text()
    assert "-e ." not in wanted and f"pytest=={pytest.__version__}" in wanted
    python = env_python(out, "envs/calc")
    assert python.startswith(str(cache_root())) or "cache" in python


def test_mined_tasks_name_the_env_and_pass_only_with_it(world):
    tasks = world["tasks"]
    assert {t.suite for t in tasks} == {"bugfix", "lint", "lookup"}, (
        "the probes and checks could not import the dependency"
    )
    assert all(t.env == "envs/calc" for t in tasks)
    bug = next(t for t in tasks if t.suite == "bugfix")
    snapshot = world["out"] / bug.repo
    fixed = snapshot.parent / "fixed"
    shutil.copytree(snapshot, fixed)
    path = fixed / bug.solution.path
    path.write_text(path.read_text().replace(bug.solution.old, bug.solution.new, 1))  # the expert's fix
    python = env_python(world["out"], bug.env)
    ok, details = run_check(fixed, bug.check.test, bug.check.packages, python=python)
    assert ok, details
    ok, details = run_check(fixed, bug.check.test, bug.check.packages)  # the harness's Python
    assert not ok and "ModuleNotFoundError" in details["output"]


def test_sandbox_runs_the_env_python_and_the_harness_python_cannot_import(world, tmp_path):
    python = env_python(world["out"], "envs/calc")
    ws = tmp_path / "ws"
    ws.mkdir()
    box = Sandbox(ws, python=python)
    res = box.run(f"python -c 'import {DEP}, sys; print({DEP}.FACTOR, sys.executable)' && pytest --version")
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"3 {python}") and "pytest" in res.output
    res = box.run(f"{PYTHON} -c 'import {DEP}'")
    assert res.exit_code != 0 and "ModuleNotFoundError" in res.output
    got = probe(world["out"] / "repos/train/calc", ["calc"], {"calc.ops": [("scale", "2")]}, python=python)
    assert got["calc.ops"]["calls"] == [{"ret": "7"}]
    assert "error" in probe(world["out"] / "repos/train/calc", ["calc"], {"calc.ops": [("scale", "2")]})["calc.ops"]


def test_episode_of_an_env_task_runs_tools_and_check_in_the_env(world):
    task = Task(
        id="t/calc/0",
        suite="bugfix",
        split="train",
        repo="repos/train/calc",
        instruction="check",
        tools=["run_terminal", "run_tests", "finish"],
        env="envs/calc",
        check=Check(
            kind="tests",
            test="from calc import ops\n\ndef test_scale():\n    assert ops.scale(2) == 7\n",
            packages=["calc"],
        ),
        solution=Solution(kind="none"),
    )
    script = [turn(call("run_terminal", command=f"python -c 'import {DEP}; print({DEP}.FACTOR * 14)'")),
              turn(call("finish", summary="done"))]  # fmt: skip
    policy = lambda m, t, n: AssistantTurn(text=script.pop(0))
    traj = run_task(task, world["out"], policy, Budgets(max_turns=3))
    assert "42" in traj.turns[0].calls[0].output, traj.turns[0].calls[0].output
    assert traj.outcome.success, traj.outcome.details
    bare = task.model_copy(update={"env": None})
    script = [turn(call("finish", summary="done"))]
    assert run_task(bare, world["out"], policy, Budgets(max_turns=3)).outcome.success is False


def test_env_is_rebuilt_from_the_lock_when_missing(world):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNESSRL_ENV_CACHE", str(world["root"] / "other-cache"))
        python = env_python(world["out"], "envs/calc")
        assert python.startswith(str(world["root"] / "other-cache"))
        res = Sandbox(world["root"], python=python).run(f"python -c 'import {DEP}' && pytest --version")
        assert res.exit_code == 0, res.output


def test_stdlib_only_sources_get_no_env(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "mod.py").write_text("LIMIT = 3\nSTEP = 4\n\n\ndef twice(x: int) -> int:\n    return 2 * x\n")
    assert requirements_of(src) is None and build_env("plain", src, tmp_path) is None
    (src / "requirements.txt").write_text("# nothing\n\n")
    assert build_env("plain", src, tmp_path) is None
    (src / "requirements.txt").unlink()
    (src / "pyproject.toml").write_text('[project]\nname = "plain"\ndependencies = []\n')
    assert build_env("plain", src, tmp_path) is None
    assert not (tmp_path / "envs").exists()
    out = tmp_path / "data"
    out.mkdir()
    kept, _, infos, _ = mine_sources(
        [SourceConfig(name="plain", path=str(src), tasks={"lookup": 1})], 0, out, workers=1
    )
    assert infos[0].env is None and kept["train"] and all(t.env is None for t in kept["train"])
    write_sources(out, infos)
    assert json.loads((out / "sources.json").read_text())[0]["env"] is None


def test_bad_requirement_names_the_source_and_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_ENV_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "mod.py").write_text("X = 1\n")
    (src / "requirements.txt").write_text("--no-index\nno-such-package-hrl==9.9\n")
    out = tmp_path / "data"
    out.mkdir()
    with pytest.raises(SourceError) as e:
        mine_sources([SourceConfig(name="broken", path=str(src), tasks={"lookup": 1})], 0, out)
    msg = str(e.value)
    assert "'broken'" in msg and "requirements.txt" in msg and "no-such-package-hrl" in msg, msg
    assert isinstance(e.value.__cause__, EnvError)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == []  # nothing half-built left behind
