"""The RL stage on CPU: the DeepSpeed trainer, its metrics, the hack monitors' incidents, a stop on
alarm, and an exact resume after a crash mid-run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from components.rl import work
from harnessrl.config import compose
from harnessrl.metrics import read_metrics
from harnessrl.rewards.monitors import HackAlarm, read_incidents
from harnessrl.rl import rollouts
from harnessrl.stage import run_stage
from pipelines.routing import stage_slice
from tests.conftest import SMOKE, needs_bwrap

pytestmark = [needs_bwrap, pytest.mark.usefixtures("answer_length_reward")]


VARIED = ["stages.rl.monitors.warmup_steps=0"]


def rl_stage(tiny_base: dict[str, Path], out: Path, *overrides: str) -> Path:
    cfg = compose([*SMOKE, *VARIED, *overrides])
    run_stage("rl", work, json.dumps(stage_slice(cfg, "rl")), str(tiny_base["data"]), "md5", str(tiny_base["base"]),
              str(out))  # fmt: skip
    return out


def test_rl_steps_log_the_objective_and_the_monitors(tiny_base: dict[str, Path], tmp_path: Path) -> None:
    out = rl_stage(tiny_base, tmp_path / "rl", "stages.rl.steps=2")
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["staleness"] == 0.0 and r["trained_tokens"] > 0 and r["grad_norm"] > 0
        assert 0 <= r["clip_frac"] <= 1 and 0 <= r["tis/truncated_frac"] <= 1
        assert r["entropy"] > 0 and 0 <= r["uniform_groups"] <= 1 and r["refill_groups"] == 0  # refill is off
        assert {"hack/malformed", "hack/clarify", "hack/check_tamper", "hack/unsupported_answer"} <= set(r)
        assert {"reward/outcome", "reward/malformed", "reward/turns"} <= set(r)
    # The untrained base model answers at once with a guess no tool output backs: that monitor fires.
    incidents = read_incidents(out / "incidents.jsonl")
    assert [i["step"] for i in incidents] == [1, 2] and {i["monitor"] for i in incidents} == {"unsupported_answer"}
    assert "stages.rl.monitors.unsupported_answer_max" in incidents[0]["message"]
    assert (out / "manifest.json").is_file()


def test_an_alarm_stops_the_run_when_configured(tiny_base: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(HackAlarm, match="unsupported_answer"):
        rl_stage(tiny_base, tmp_path / "rl", "stages.rl.steps=3", "stages.rl.monitors.stop_on_alarm=true")
    assert not (tmp_path / "rl").exists()  # a failed stage leaves no checkpoint behind


@pytest.mark.parametrize("curriculum", ["uniform", "pass_rate"])  # the pass rates are resumable state too
def test_a_crashed_run_resumes_from_its_last_state_exactly(
    tiny_base: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, curriculum: str
) -> None:
    args = ("stages.rl.steps=3", "stages.rl.checkpoint_every=1", "stages.rl.monitors.unsupported_answer_max=null",
            f"stages.rl.curriculum={curriculum}")  # fmt: skip
    straight = rl_stage(tiny_base, tmp_path / "straight", *args)

    real_run, calls = rollouts.run_group, []

    def crash_at_third_step(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("killed")  # as a kill would: mid-step, after two saved steps
        return real_run(*a, **k)

    monkeypatch.setattr(rollouts, "run_group", crash_at_third_step)
    with pytest.raises(KeyboardInterrupt):
        rl_stage(tiny_base, tmp_path / "resumed", *args)
    assert (tmp_path / "resumed.state" / "latest").read_text() == "step2"
    saved = torch.load(tmp_path / "resumed.state" / "step2" / "mp_rank_00_model_states.pt", weights_only=False)
    rates = saved["extra"]["pass_rates"]
    assert len(rates) > 0 and all(0 <= p < 0.5 for p in rates.values())  # kept in either mode, and saved
    monkeypatch.setattr(rollouts, "run_group", real_run)
    resumed = rl_stage(tiny_base, tmp_path / "resumed", *args)

    assert [r["step"] for r in read_metrics(resumed / "metrics.jsonl")] == [1, 2, 3]  # nothing lost or doubled
    a, b = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)  # the same weights, bit for bit
    base = load_file(tiny_base["base"] / "model.safetensors")
    assert any(not (a[k] == base[k]).all() for k in a)  # and RL did change them
    for key in ("reward", "success", "malformed"):
        assert read_metrics(straight / "metrics.jsonl")[-1][key] == read_metrics(resumed / "metrics.jsonl")[-1][key]
