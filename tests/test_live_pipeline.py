"""The live cycle as a pipeline: compiled for the cluster (uncached, over a live folder on the PVC),
scheduled as a KFP recurring run every live.recurring_hours, and run once under kfp's local runner."""

from __future__ import annotations

from pathlib import Path

import kfp
import pytest
import yaml
from kfp import local

from harnessrl.config import compose
from harnessrl.data.md5 import dvc_dir_md5
from harnessrl.lineage.manifest import code_hash
from harnessrl.serve.session_log import read_log
from pipelines.dag import DataSource
from pipelines.live import build_live_pipeline
from tests.conftest import run_cli
from tests.test_live_cycle import SMOKE, log_sessions

# The live cycle trains on one rank: qwen's RL trains on eight, so the live run overrides it.
QWEN = ["--recipe", "qwen_coder_7b", "stages.rl.trainer_world_size=1", "~stages.rl.placement.trainer"]


def test_compile_runs_the_cycle_uncached_over_the_pvc(tmp_path: Path, capsys) -> None:
    out = tmp_path / "live.yaml"
    assert run_cli("live", "compile", *QWEN, "--live-dir", "/models/live/qwen", "-o", str(out)) == 0
    ir = next(yaml.safe_load_all(out.read_text()))  # the pipeline spec; then the Kubernetes platform spec
    tasks = ir["root"]["dag"]["tasks"]
    assert set(tasks) == {"data", "live-cycle"}
    assert tasks["live-cycle"].get("cachingOptions", {}).get("enableCache") is not True
    assert ir["root"]["inputDefinitions"]["parameters"]["live_dir"]["defaultValue"] == "/models/live/qwen"
    capsys.readouterr()
    assert run_cli("live", "compile", *QWEN, "--live-dir", "/elsewhere/live", "-o", str(out)) == 2
    assert "not on infra.pvc" in capsys.readouterr().err
    assert run_cli("live", "compile", "--live-dir", "/models/live", "-o", str(out)) == 2  # local: no PVC
    assert "no infra.pvc" in capsys.readouterr().err
    assert run_cli("live", "compile", "--recipe", "qwen_coder_7b", "--live-dir", "/models/live/q", "-o", str(out)) == 2
    assert "stages.rl.trainer_world_size=8: the live cycle trains on one rank" in capsys.readouterr().err


def test_schedule_creates_one_recurring_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    calls = {}

    class Client:  # kfp.Client's two calls, recorded: no KFP endpoint here
        def __init__(self, host: str) -> None:
            calls["host"] = host

        def create_experiment(self, name: str):
            calls["experiment"] = name
            return type("Experiment", (), {"experiment_id": "exp-1"})()

        def create_recurring_run(self, **kw):
            calls["run"] = kw | {"package_exists": Path(kw["pipeline_package_path"]).is_file()}
            return type("RecurringRun", (), {"recurring_run_id": "rr-1"})()

    monkeypatch.setattr(kfp, "Client", Client)
    out = tmp_path / "live.yaml"
    rc = run_cli("live", "schedule", *QWEN, "live.recurring_hours=3", "--live-dir", "/models/live/qwen", "--host",
                 "https://kfp.example.com", "-o", str(out))  # fmt: skip
    assert rc == 0 and "recurring run rr-1" in capsys.readouterr().out
    run = calls["run"]
    assert calls["host"] == "https://kfp.example.com" and run["experiment_id"] == "exp-1"
    assert run["interval_second"] == 3 * 3600 and run["max_concurrency"] == 1 and run["no_catchup"] is True
    assert run["enable_caching"] is False and run["package_exists"]


def test_the_live_pipeline_runs_a_cycle_under_kfp_local(tiny_base, smoke_data_root: Path, tmp_path: Path) -> None:
    live = tmp_path / "live"
    log_sessions(tiny_base["base"], live)
    cfg = compose([*SMOKE, f"data.dir={smoke_data_root}"])
    source = DataSource(md5=dvc_dir_md5(tiny_base["data"]), folder=str(tiny_base["data"]))
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "kfp"), raise_on_error=True)
    result = build_live_pipeline(cfg, source, code_hash(), str(live))()
    (row,) = read_log(live / "cycles.jsonl")[0]
    assert result.output == row["result"] and row["result"] in ("promoted", "rejected")
    assert row["sessions"] == 6 and (live / "report" / "live.md").is_file()
