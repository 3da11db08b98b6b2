"""Placement by Ray resources on a real two-node Ray cluster on this machine (`ray start --head` and a
second `ray start --address`), as KubeRay's worker groups advertise them: the rollout workers land on
the node with the `rollout` resource, the environment workers on the one with `env`, and a group of
episodes runs across the two."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harnessrl.config import EngineConfig, compose
from harnessrl.model.checkpoint import load
from harnessrl.rl.fleet import RayRollouts
from harnessrl.tasks.task import Task
from harnessrl.train import distributed
from tests.conftest import SMOKE, needs_bwrap

ray = pytest.importorskip("ray")
PLACED = ["stages.rl.mode=async", "+stages.rl.placement.rollout.rollout=1", "+stages.rl.placement.env.env=1"]


def ray_start(*args: str, env: dict) -> int:
    """`ray start` in a session of its own; returns the session id, which every process it leaves
    running keeps, so the cluster can be stopped without touching any other Ray on the machine."""
    ray_bin = str(Path(sys.executable).with_name("ray"))  # this interpreter's Ray, a venv's included
    proc = subprocess.Popen([ray_bin, "start", *args], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    out, _ = proc.communicate(timeout=120)
    if proc.returncode:
        raise RuntimeError(f"ray start {' '.join(args)} failed:\n{out}")
    return proc.pid


def kill_sessions(sessions: list[int]) -> None:
    """Every process of these sessions (`ray stop` would kill every Ray process on the machine)."""
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[3]) in sessions:
                os.kill(int(proc.name), signal.SIGKILL)


@pytest.fixture(scope="module")
def two_nodes():
    """A head node with the `rollout` resource and a worker node with `env`, on loopback."""
    temp = tempfile.mkdtemp(prefix="hrl-ray2-")  # short: Ray's socket paths must stay under 108 bytes
    env = os.environ | {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    address = f"127.0.0.1:{distributed.free_port()}"
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    sessions: list[int] = []
    try:
        sessions.append(ray_start("--head", f"--port={address.split(':')[1]}", "--include-dashboard=false",
                                  f"--temp-dir={temp}", "--resources", json.dumps({"rollout": 1}), *common,
                                  env=env))  # fmt: skip
        sessions.append(ray_start(f"--address={address}", "--resources", json.dumps({"env": 1}), *common, env=env))
        yield address
    finally:
        kill_sessions(sessions)
        shutil.rmtree(temp, ignore_errors=True)


def nodes_by_resource() -> dict[str, str]:
    return {r: n["NodeID"] for n in ray.nodes() if n["Alive"] for r in ("rollout", "env") if r in n["Resources"]}


@needs_bwrap
def test_each_actor_kind_runs_on_the_node_with_its_resource(
    two_nodes: str, tiny_base: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:

    monkeypatch.setenv("RAY_ADDRESS", two_nodes)  # as KubeRay sets it for a RayJob's driver
    cfg = compose([*SMOKE, *PLACED]).stages.rl
    _, tok = load(tiny_base["base"])
    engine = EngineConfig(kind="hf")
    fleet = RayRollouts(tiny_base["base"], tok, tiny_base["data"], cfg, cfg.budgets(), tmp_path, engine)
    try:
        where = nodes_by_resource()
        assert where["rollout"] != where["env"]  # two nodes
        assert ray.get([w.node_id.remote() for w in fleet.rollout_workers]) == [where["rollout"]]
        assert ray.get([w.node_id.remote() for w in fleet.env_workers]) == [where["env"]]
        rows = [json.loads(x) for x in (tiny_base["data"] / "prompts.jsonl").read_text().splitlines()]
        task = next(Task.model_validate(r["task"]) for r in rows if r["task"]["suite"] == "lookup")
        fleet.submit(task, seed=0)
        (group,) = fleet.ready(1)  # episodes on the env node, sampling from the rollout node
        assert len(group) == cfg.group_size and all(r.trajectory.task_id == task.id for r in group)
    finally:
        fleet.close()
