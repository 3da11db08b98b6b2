"""Shared fixtures. End-to-end runs go through the same CLI a researcher uses."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

# pytest-xdist runs the suite on two workers (`-n 2` in pyproject.toml), which share the machine's
# cores. Each worker takes one thread, and vLLM's CPU engine binds to a core of the worker's own,
# before torch or vLLM is imported: two processes spinning two OpenMP threads each on two cores ran
# the tiny recipe's SFT 5-9x slower than one process alone.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if WORKER:
    cores = sorted(os.sched_getaffinity(0))
    os.environ.update(
        HARNESSRL_THREADS="1",
        OMP_NUM_THREADS="1",
        VLLM_CPU_OMP_THREADS_BIND=str(cores[int(WORKER.removeprefix("gw")) % len(cores)]),
    )

import pytest  # noqa: E402

from harnessrl.cli import main  # noqa: E402
from harnessrl.harness import sandbox as sb  # noqa: E402
from pipelines.routing import stage_slice  # noqa: E402

# Sandbox tests skip on a laptop without bubblewrap, but never in CI (CI=true), where a missing
# sandbox must fail loudly rather than hide behind a skip.
SANDBOX_OK = sb._bwrap_path() is not None and sb._bwrap_works()
needs_bwrap = pytest.mark.skipif(
    not SANDBOX_OK and not os.environ.get("CI"), reason="needs bubblewrap (apt-get install bubblewrap)"
)

SMOKE = ["recipe=tiny_smoke"]

# Each xdist worker builds its own session fixtures. The test modules that name the default
# recipe's run (11 minutes) or its data go to one worker as one unit of work; every other module is
# a unit of its own, so a module's fixtures are built once too. The cheap session fixtures (tiny_base,
# tiny_sft) may be built on both workers. (xdist's `--dist loadgroup` would read marks, but its
# group names do not reach the scheduler under pytest 9, so the grouping is by module here.)
SHARED_FIXTURES = re.compile(r"\b(tiny_run|default_data)\b")


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    here = Path(__file__).parent
    shared = {p.name for p in here.glob("test_*.py") if SHARED_FIXTURES.search(p.read_text())}

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::")[0]
            return "default-recipe" if Path(module).name in shared else module

    return ByModule(config, log)


def run_cli(*args: str) -> int:
    return main([*args])


def summary(run_dir: Path) -> dict[str, dict]:
    """The run's summary rows by stage."""
    rows = json.loads((run_dir / "summary.json").read_text())["stages"]
    return {r["stage"]: r for r in rows}


@pytest.fixture(scope="session")
def smoke_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A data folder and kfp pipeline root shared by the end-to-end tests of one session."""
    root = tmp_path_factory.mktemp("smoke")
    return {"root": root, "data": root / "data", "kfp": root / "kfp"}


@pytest.fixture(scope="session")
def smoke_run(smoke_env: dict[str, Path]) -> Path:
    """The tiny smoke recipe run once, uncached, through kfp's local runner."""
    run_dir = smoke_env["root"] / "run-first"
    rc = run_cli(
        "run",
        *SMOKE,
        f"data.dir={smoke_env['data']}",
        "--output-dir",
        str(run_dir),
        "--pipeline-root",
        str(smoke_env["kfp"]),
    )
    assert rc == 0
    return run_dir


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The smoke recipe's data and base checkpoint, built directly (no pipeline), for stage tests."""
    from components.base import work
    from harnessrl.config import compose
    from harnessrl.data.build import build
    from harnessrl.stage import run_stage

    root = tmp_path_factory.mktemp("tiny-base")
    cfg = compose(SMOKE)
    data = build(cfg.data, root / "data")
    run_stage("base", work, json.dumps(stage_slice(cfg, "base")), str(data), "md5", None, str(root / "base"))
    return {"root": root, "data": data, "base": root / "base"}


@pytest.fixture(scope="session")
def tiny_sft(tiny_base: dict[str, Path]) -> Path:
    """The tiny base after 80 SFT steps (about 20 s): enough that most first turns open a tool call,
    well formed or not, so episodes go on past their first turn (the base model answers at once)."""
    out = tiny_base["root"] / "sft"
    stage_on_base(tiny_base, "sft", out, [*SMOKE, "stages.sft.steps=80", "stages.sft.log_every=40"])
    return out


@pytest.fixture(scope="session")
def smoke_data_root(tiny_base: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data.dir whose folder for the smoke recipe's data config is the tiny base's data."""
    from harnessrl.config import compose
    from harnessrl.data.build import folder_name

    root = tmp_path_factory.mktemp("smoke-data-root")
    (root / folder_name(compose(SMOKE).data)).symlink_to(tiny_base["data"])
    return root


def stage_on_base(tiny_base: dict[str, Path], stage: str, out: Path, overrides: list[str]) -> None:
    """One training stage, as its KFP component runs it, on the smoke data and base checkpoint."""
    import importlib

    from harnessrl.config import compose
    from harnessrl.stage import run_stage

    module = importlib.import_module(f"components.{'long_horizon_rl' if stage == 'long_horizon' else stage}")
    cfg = json.dumps(stage_slice(compose(overrides), stage))
    run_stage(stage, module.work, cfg, str(tiny_base["data"]), "md5", str(tiny_base["base"]), str(out))


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray session (2 CPUs) for a test module, shut down after it."""
    import tempfile

    ray = pytest.importorskip("ray")
    from harnessrl.rl.fleet import start_ray

    with tempfile.TemporaryDirectory(prefix="ray-") as d:
        assert start_ray(d, num_cpus=2)
        try:
            yield
        finally:
            ray.shutdown()


@pytest.fixture
def kube_api(monkeypatch: pytest.MonkeyPatch):
    """Install a fake Kubernetes custom-objects API for the stages that create jobs (harnessrl/cluster)."""
    from harnessrl.cluster import kube

    def install(api):
        monkeypatch.setattr(kube, "kube_api", lambda: api)
        return api

    return install


@pytest.fixture(scope="session")
def default_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default recipe's data folder, built once per session (about a minute: every SFT
    conversation is an expert episode in the sandbox). Tests only read it."""
    from harnessrl.config import compose
    from harnessrl.data.build import build, data_folder

    cfg = compose([]).data
    return build(cfg, data_folder(cfg, tmp_path_factory.mktemp("default-data")))  # where data.dir=data finds it


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, default_data: Path) -> Path:
    """The default recipe, whole, as `harnessrl run` runs it (about 11 minutes on 2 cores): run once
    per session and shared by the slow tests that need trained checkpoints."""
    root = tmp_path_factory.mktemp("tiny")
    run_dir = root / "run"
    data_dir = f"data.dir={default_data.parent}"
    rc = run_cli("run", data_dir, "--output-dir", str(run_dir), "--pipeline-root", str(root / "kfp"))
    assert rc == 0
    return run_dir


@pytest.fixture
def answer_length_reward(monkeypatch: pytest.MonkeyPatch) -> None:
    """The untrained base model answers every task at once, wrongly and at full length, so every
    shaped component ties within a group and no update would happen. A deterministic extra component
    (the answer's length in characters) gives nonzero advantages, so these tests train for real."""
    from harnessrl.rl import loop

    real = loop.reward_components

    def with_length(traj, weights, questions_needed=0):
        return real(traj, weights, questions_needed) | {"length": len(traj.outcome.final_answer or "") / 100}

    monkeypatch.setattr(loop, "reward_components", with_length)
