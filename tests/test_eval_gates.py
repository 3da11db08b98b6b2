"""Regression gates in the eval stage, both ways: a checkpoint worse than its parent beyond tolerance
fails the stage with one clear line (after the report is written and kept); within tolerance it passes.
The episodes are stubbed (success chosen per stage) so the test is about the stage, not the model."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from components.evaluate import work
from harnessrl.config import EvalConfig, GateConfig
from harnessrl.lineage.manifest import write_manifest
from harnessrl.report import episodes
from harnessrl.report.gates import GateFailed, check_gates
from harnessrl.report.metrics import row_suite
from harnessrl.stage import run_stage
from tests.conftest import run_cli

# Solved tasks (of 4) per stage: RL drops from SFT's 3 to 2, long-horizon RL climbs to 4.
SOLVED = {"base": 0, "cpt": 1, "sft": 3, "rl": 2, "long_horizon": 4}


def fake_chain(root: Path) -> Path:
    """base -> ... -> long_horizon, each a folder with a manifest; RL stages with metrics.jsonl."""
    parent = None
    for stage in SOLVED:
        ckpt = root / stage
        ckpt.mkdir(parents=True)
        (ckpt / "weights.bin").write_text(stage)  # distinct weights ids
        if stage in ("rl", "long_horizon"):
            rows = [{"step": i + 1, "reward": 0.1 * i, "malformed": 0.5 - 0.1 * i} for i in range(3)]
            (ckpt / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        write_manifest(ckpt, stage=stage, config={}, parent=parent, data_md5="md5", metrics={}, started=time.time(),
                       seed=0)  # fmt: skip
        parent = ckpt
    return parent


@pytest.fixture
def stub_episodes(monkeypatch: pytest.MonkeyPatch) -> None:
    def rows(path, tasks, data_dir, cfg, dtype, engine=None, vllm=None, tool_format=None):
        # Each source's tasks solved alike (the generated lookups and hydra's): the first `solved` of each.
        solved = SOLVED[Path(path).name]
        index = {t.id: [u.id for u in tasks if row_suite(u) == row_suite(t)].index(t.id) for t in tasks}
        return [{"suite": row_suite(t), "task_id": t.id, "seed": s, "success": index[t.id] < solved,
                 "stop_reason": "final", "turns": 1 + index[t.id] % 3, "tool_calls": 1, "parallel_turns": 0,
                 "malformed_turns": 0, "asked": False, "tokens": 20, "wall_s": 0.01}
                for s in cfg.seeds for t in tasks]  # fmt: skip

    monkeypatch.setattr(episodes, "checkpoint_rows", rows)


def _run_eval(root: Path, data: Path, gates: list[dict]) -> Path:
    cfg = {"name": "t", "seed": 0, "model": {"dtype": "float32", "tool_format": "hermes"}, "engine": {"kind": "hf"},
           "stage": {"mix": {"lookup": 1.0}, "seeds": [0], "num_tasks": 4, "max_new_tokens": 8, "gates": gates}}  # fmt: skip
    out = root / "eval"
    run_stage("eval", work, json.dumps(cfg), str(data), "md5", str(root / "long_horizon"), str(out))
    return out


def test_a_checkpoint_worse_than_its_parent_fails_the_stage_after_writing_the_report(
    tmp_path: Path, tiny_base: dict, stub_episodes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESSRL_STATE_ROOT", str(tmp_path / "run" / "state"))
    fake_chain(tmp_path)
    with pytest.raises(GateFailed) as err:
        _run_eval(tmp_path, tiny_base["data"], [{"metric": "success", "tolerance": 0.1, "stages": ["rl"]}])
    msg = str(err.value)
    assert "\n" not in msg
    rl_id = json.loads((tmp_path / "rl" / "manifest.json").read_text())["id"][:12]
    for part in ("eval gate failed: rl checkpoint", rl_id, "success gate on lookup", "0.5000", "parent sft",
                 "0.7500", "higher is better", "tolerance 0.1"):  # fmt: skip
        assert part in msg
    assert not (tmp_path / "eval").exists()  # a failed stage leaves no output
    kept = Path(msg.rsplit("report: ", 1)[1]).parent
    report = json.loads((kept / "report.json").read_text())
    assert [g["ok"] for g in report["gates"]] == [False, False]  # on lookup and on lookup@hydra
    assert (kept / "report.html").is_file() and (kept / "success_by_stage.png").is_file()
    # `harnessrl report` finds the kept report of the failed run.
    (tmp_path / "run" / "run.json").write_text("{}")
    assert run_cli("report", str(tmp_path / "run")) == 0
    assert "✗" in (tmp_path / "run" / "report" / "report.md").read_text()


def test_within_tolerance_the_gates_pass_and_the_report_says_so(
    tmp_path: Path, tiny_base: dict, stub_episodes: None
) -> None:
    fake_chain(tmp_path)
    gates = [{"metric": "success", "tolerance": 0.25, "stages": ["rl"]}, {"metric": "malformed"}]
    out = _run_eval(tmp_path, tiny_base["data"], gates)
    report = json.loads((out / "report.json").read_text())
    assert [r["stage"] for r in report["results"]] == list(SOLVED)
    assert [r["success"] for r in report["results"]] == [0.0, 0.25, 0.75, 0.5, 1.0]
    # A verdict per suite row (lookup, lookup@hydra): rl only for success; every stage for malformed.
    assert all(g["ok"] for g in report["gates"]) and len(report["gates"]) == 2 * (1 + 4)
    assert report["rl_effect"]["from"] == "sft" and report["rl_effect"]["to"] == "long_horizon"
    assert [r["global_step"] for r in report["training"]] == [1, 2, 3, 4, 5, 6]
    assert json.loads((out / "manifest.json").read_text())["metrics"]["success"] == 1.0


def _result(stage: str, value: float) -> dict:
    return {"stage": stage, "checkpoint": stage * 4, "suites": {"s": {"malformed": {"value": value}}}}


def test_gate_direction_comes_from_the_metric_unless_set() -> None:
    results = [_result("sft", 0.10), _result("rl", 0.30)]  # malformed went up: worse
    assert [v["ok"] for v in check_gates(results, [GateConfig(metric="malformed", tolerance=0.1)])] == [False]
    assert [v["ok"] for v in check_gates(results, [GateConfig(metric="malformed", tolerance=0.25)])] == [True]
    flipped = GateConfig(metric="malformed", higher_is_better=True)
    assert [v["ok"] for v in check_gates(results, [flipped])] == [True]
    assert check_gates(results, [GateConfig(metric="malformed", stages=["long_horizon"])]) == []
    with pytest.raises(ValueError, match="metric"):
        EvalConfig(mix={"s": 1.0}, seeds=[0], num_tasks=1, max_new_tokens=1, gates=[{"metric": "sucess"}])
