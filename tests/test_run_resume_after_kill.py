"""A run killed with SIGKILL resumes with `harnessrl run --resume RUN_DIR`, losing at most one step
and never taking a half-written checkpoint as complete."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harnessrl.lineage.manifest import chain, read_manifest
from harnessrl.metrics import read_metrics
from tests.conftest import SMOKE, run_cli, summary

pytestmark = pytest.mark.slow
CPT = ["stages.cpt.steps=24", "stages.cpt.checkpoint_every=2", "stages.cpt.log_every=1"]


def start_run(tmp_path: Path, run_dir: Path) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "harnessrl.cli",
        "run",
        *SMOKE,
        *CPT,
        f"data.dir={tmp_path / 'data'}",
        "--output-dir",
        str(run_dir),
        "--pipeline-root",
        str(tmp_path / "kfp"),
    ]
    # Its own session, so one SIGKILL takes down the run and every stage subprocess at once.
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def saved_step(latest: Path) -> int:
    try:
        return int(latest.read_text().removeprefix("step"))
    except (FileNotFoundError, ValueError):  # the stage finished and removed its state, or mid-write
        return 0


def kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def assert_complete_chain(run_dir: Path) -> None:
    rows = summary(run_dir)
    assert list(rows) == ["base", "cpt", "sft", "rl", "long_horizon", "eval"]
    for path, manifest in chain(Path(rows["eval"]["checkpoint"])):
        assert (path / "manifest.json").is_file() and not path.name.startswith(".")
        assert manifest["stage"] in rows
    steps = [m["step"] for m in read_metrics(Path(rows["cpt"]["checkpoint"]) / "metrics.jsonl")]
    assert steps == list(range(1, 25))  # every step once: nothing lost, nothing doubled
    assert not any((run_dir / "state").rglob("latest"))  # finished stages leave no resume state


def test_kill_during_cpt_after_a_saved_state_then_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = start_run(tmp_path, run_dir)
    deadline = time.time() + 300
    # DeepSpeed writes `latest` after the state's files: wait for a complete state of step 4 or later.
    # Steps are fast, so a poll may land after step 6's save: wait for "at least 4", never "exactly 4".
    while max(map(saved_step, (run_dir / "state" / "cpt").glob("*/latest")), default=0) < 4:
        assert time.time() < deadline
        assert proc.poll() is None, "the run ended before it could be killed"
        time.sleep(0.2)
    kill(proc)
    killed_state = next((run_dir / "state" / "cpt").glob("*"))
    assert saved_step(killed_state / "latest") >= 4

    assert run_cli("run", "--resume", str(run_dir)) == 0
    rows = summary(run_dir)
    assert rows["base"]["state"] == "cached" and rows["cpt"]["state"] == "done"
    assert_complete_chain(run_dir)
    cpt_log = (run_dir / "kfp.log").read_text()
    assert cpt_log.count("Executing task 'cpt'") == 2  # killed once, resumed once
    resumed_at = int(cpt_log.split("[cpt] resumed at step ")[1].split("/")[0])
    assert resumed_at >= 4  # from the saved state, not from scratch: at most the steps since it are redone


@pytest.mark.parametrize("seed", [7])
def test_kill_at_a_random_moment_then_resume(tmp_path: Path, seed: int) -> None:
    run_dir = tmp_path / "run"
    proc = start_run(tmp_path, run_dir)
    time.sleep(random.Random(seed).uniform(3.0, 25.0))
    if proc.poll() is None:
        kill(proc)
    # Whatever the moment, nothing half-written is visible as a finished checkpoint.
    for manifest in (tmp_path / "kfp").rglob("manifest.json"):
        assert read_manifest(manifest.parent)["stage"]
    assert run_cli("run", "--resume", str(run_dir)) == 0
    assert_complete_chain(run_dir)
    assert json.loads((run_dir / "run.json").read_text())["overrides"][: len(SMOKE)] == SMOKE


def test_resume_of_a_folder_that_is_no_run_is_bad_input(tmp_path: Path, capsys) -> None:
    assert run_cli("run", "--resume", str(tmp_path)) == 2
    assert "not a harnessrl run directory" in capsys.readouterr().err
