"""Recipes compose and validate; every kind of bad override is one clear line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harnessrl.cli import main
from harnessrl.config import CONF_DIR, Config, ConfigError, compose
from pipelines.routing import enabled_stages, stage_slice, training_nodes

RECIPES = sorted(p.stem for p in (CONF_DIR / "recipe").glob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_shipped_recipe_composes_and_validates(recipe: str) -> None:
    cfg = compose([f"recipe={recipe}"])
    assert cfg.name == recipe
    assert enabled_stages(cfg)[0] == "base"
    assert Config.model_validate(cfg.model_dump()) == cfg  # the dump round-trips


def test_default_recipe_is_tiny_and_builds_a_model_from_config() -> None:
    cfg = compose([])
    assert cfg.name == "tiny"
    assert cfg.model.path is None and cfg.model.arch is not None
    assert enabled_stages(cfg) == ["base", "cpt", "sft", "rl", "long_horizon", "eval"]


def test_gpu_recipe_expresses_cluster_settings() -> None:
    cfg = compose(["recipe=qwen_coder_7b"])
    assert cfg.model.path and cfg.model.path.startswith("/")  # a local path, never a hub id
    train = cfg.infra.for_stage("cpt")
    assert train.accelerator_count == 8 and train.accelerator_type == "nvidia.com/gpu"
    assert train.cpu and train.memory and train.node_selector and train.tolerations
    assert cfg.stages.cpt.zero_stage == 3
    assert cfg.engine.kind == "vllm" and cfg.engine.tensor_parallel_size >= 1
    assert cfg.stages.rl.rollout_workers > 1 and cfg.stages.rl.env_workers > 1


def test_gpu_recipe_builds_the_context_policy_it_names() -> None:
    """qwen_coder_7b's context trigger and summary cap reach the harness through the same code
    the tiny recipe runs (RLConfig.budgets)."""

    lh = compose(["recipe=qwen_coder_7b"]).stages.long_horizon
    budgets = lh.budgets()
    assert budgets.context.model_dump() == {"policy": "summarize", "budget": 32768, "trigger": 24576,
                                            "summary_max_tokens": 1024, "max_summaries": 4}  # fmt: skip
    assert budgets.max_turn_tokens == lh.max_new_tokens == 4096 and budgets.max_turns == lh.max_turns
    assert compose(["recipe=qwen_coder_7b"]).stages.rl.budgets().context.policy == "none"
    tiny = compose([]).stages.long_horizon.budgets().context
    assert (tiny.policy, tiny.budget, tiny.trigger, tiny.summary_max_tokens) == ("summarize", 232, 144, 52)


BAD_OVERRIDES = [
    # (override, field named, words of what was expected)
    ("stages.cpt.lrr=0.1", "stages.cpt.lrr", "unknown field"),
    ("+stages.cpt.lrr=0.1", "stages.cpt.lrr", "unknown field"),
    ("stages.cpt.steps=many", "stages.cpt.steps", "valid integer"),
    ("stages.cpt.steps=0", "stages.cpt.steps", "greater than 0"),
    ("stages.rl.clip_low=1.5", "stages.rl.clip_low", "less than 1"),
    ("stages.cpt.schedule=wavy", "stages.cpt.schedule", "'cosine', 'linear' or 'constant'"),
    ("model=medium", "model", "unknown option 'medium'"),
    (
        "recipe=huge",
        "recipe",
        "available: qwen_coder_7b, qwen_coder_7b_mini, smol, tiny, tiny_lessons, tiny_real, tiny_smoke",
    ),
    ("data.name=???", "data.name", "missing required value"),
    ("~stages.sft.lr", "stages.sft.lr", "missing required value"),
    ("model.arch.hidden_size=130", "model.arch", "divisible by num_heads"),
    ("stages.long_horizon.context.trigger=400", "stages.long_horizon.context", "must fit in the budget"),
    (
        "stages.long_horizon.context.policy=compact",
        "stages.long_horizon.context.policy",
        "'none', 'truncate' or 'summarize'",
    ),
    ("stages.long_horizon.enabled=false", "stages.eval.long_horizon_tasks", "needs the long-horizon stage"),
    # Settings that would do nothing are refused, naming the field.
    ("stages.rl.rollout_workers=4", "stages.rl", "rollout_workers=4 take effect only in mode async"),
    ("stages.long_horizon.env_workers=8", "stages.long_horizon", "env_workers=8 take effect only in mode async"),
    ("+stages.rl.placement.env.env=1", "stages.rl", "placement.env take effect only in mode async"),
    ("stages.rl.trainer_world_size=8", "stages.rl", "trainer_world_size=8 take effect only in mode async"),
    ("stages.rl.max_staleness=2", "stages.rl", "max_staleness=2 take effect only in mode async"),
    ("stages.long_horizon.max_staleness=0", "stages.long_horizon", "max_staleness=0 take effect only in mode async"),
    ("engine.max_model_len=1024", "engine", "max_model_len=1024 take effect only with kind vllm"),
    ("engine.tensor_parallel_size=2", "engine", "tensor_parallel_size=2 take effect only with kind vllm"),
    ("engine.gpu_memory_utilization=0.5", "engine", "gpu_memory_utilization=0.5 take effect only with kind vllm"),
    ("+model.name=tiny-llama", "model.name", "unknown field"),  # read by nothing, so no longer a field
]


def test_settings_that_take_effect_elsewhere_are_accepted_there() -> None:
    vllm = compose(["engine=vllm", "engine.max_model_len=1024", "engine.gpu_memory_utilization=0.5"]).engine
    assert (vllm.max_model_len, vllm.gpu_memory_utilization) == (1024, 0.5)
    assert compose(["engine.max_model_len=null", "engine.tensor_parallel_size=1"]).engine.kind == "hf"  # the defaults
    assert compose(["stages.rl.mode=async", "stages.rl.max_staleness=0"]).stages.rl.max_staleness == 0
    assert main(["config", "validate", "engine.max_model_len=1024"]) == 2  # the CLI's exit for a refused field


def test_the_gpu_recipe_reads_as_it_runs() -> None:
    cfg = compose(["recipe=qwen_coder_7b"])  # async RL on a Ray fleet, one trainer rank; CPT on two nodes
    assert cfg.stages.rl.mode == cfg.stages.long_horizon.mode == "async"
    assert cfg.stages.rl.trainer_world_size == 8 and training_nodes(cfg, "cpt") == 2
    with pytest.raises(ConfigError, match=r"trainer_world_size=8 with zero_stage=3"):
        compose(["recipe=qwen_coder_7b", "stages.rl.zero_stage=3"])


@pytest.mark.parametrize(("override", "field", "expected"), BAD_OVERRIDES)
def test_bad_override_names_the_field(override: str, field: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose([override])
    message = str(err.value)
    assert message.startswith(f"{field}: ")
    assert expected in message
    assert "\n" not in message


@pytest.mark.parametrize("command", ["run", "compile", "validate", "show"])
def test_cli_exits_2_with_one_line_and_writes_nothing(command: str, tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "existing-run"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text('{"keep": true}')
    before = {p: p.read_bytes() for p in run_dir.rglob("*")}
    args = {
        "run": ["run", "stages.cpt.steps=-3", "--output-dir", str(run_dir), "--pipeline-root", str(tmp_path / "k")],
        "compile": ["compile", "stages.cpt.steps=-3", "-o", str(tmp_path / "p.yaml")],
        "validate": ["config", "validate", "stages.cpt.steps=-3"],
        "show": ["config", "show", "stages.cpt.steps=-3"],
    }[command]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["harnessrl: error: stages.cpt.steps: Input should be greater than 0 (got -3)"]
    assert {p: p.read_bytes() for p in run_dir.rglob("*")} == before
    assert not (tmp_path / "k").exists() and not (tmp_path / "p.yaml").exists()


def test_console_script_exit_codes() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "harnessrl.cli", "config", "validate", "recipe=qwen_coder_7b"],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "harnessrl.cli", "config", "validate", "model=nope"], capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert bad.stderr.strip() == "harnessrl: error: model: unknown option 'nope' (available: qwen_coder_7b, tiny)"


def test_config_show_prints_resolved_yaml_and_schema_is_json(capsys) -> None:
    import yaml

    assert main(["config", "show", "stages.rl.steps=7"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["stages"]["rl"]["steps"] == 7
    assert compose(["stages.rl.steps=7"]) == Config.model_validate(shown)
    assert main(["config", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) >= {"model", "data", "stages", "reward", "engine", "infra"}


def test_config_schema_shows_the_defaults_a_run_gets(capsys) -> None:
    """Each field's default is the composed recipe's value, with the same overrides as `config show`:
    CPT and SFT share TrainConfig yet show their own, and a part the recipe sets is no longer null."""

    def defaults(schema: dict, value: dict) -> None:  # every field's default equals the composed value
        for name, prop in schema["properties"].items():
            nested = next((b for b in [prop, *prop.get("anyOf", [])] if "properties" in b), None)
            if nested is not None and isinstance(value[name], dict):
                assert "default" not in prop, name
                defaults(nested, value[name])
            else:
                assert prop["default"] == value[name], name

    assert main(["config", "schema", "recipe=qwen_coder_7b", "stages.rl.max_turns=7"]) == 0
    schema = json.loads(capsys.readouterr().out)
    cfg = compose(["recipe=qwen_coder_7b", "stages.rl.max_turns=7"])
    defaults(schema, cfg.model_dump(mode="json"))
    stages = schema["properties"]["stages"]["properties"]
    assert [stages[s]["properties"]["steps"]["default"] for s in ("cpt", "sft")] == [2000, 500]
    assert stages["rl"]["properties"]["max_turns"]["default"] == 7
    assert stages["sft"]["properties"]["length_buckets"]["default"] == [128]  # TrainConfig says []; the recipe 128
    trainjob = schema["properties"]["infra"]["properties"]["trainjob"]
    assert (
        next(b for b in trainjob["anyOf"] if "properties" in b)["properties"]["runtime"]["default"]
        == "torch-distributed"
    )
    assert main(["config", "schema", "stages.rl.steps=many"]) == 2  # a bad override: as every config command


def test_stage_slices_keep_other_stages_config_out() -> None:
    a, b = compose([]), compose(["stages.rl.lr=0.001"])
    for stage in ("base", "cpt", "sft", "long_horizon", "eval"):
        assert stage_slice(a, stage) == stage_slice(b, stage)
    assert stage_slice(a, "rl") != stage_slice(b, "rl")


def test_the_vllm_engine_is_refused_by_name_where_vllm_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from harnessrl.engines.vllm import check_installed

    check_installed("hf")  # needs nothing extra
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(ValueError, match=r"engine\.kind: 'vllm' needs vLLM"):
        check_installed("vllm")


def test_a_mix_weight_of_zero_drops_a_suite_an_inherited_mix_names():
    """Hydra merges dicts key by key: a recipe drops an inherited suite by weighing it 0."""
    from harnessrl.config import EvalConfig

    base = {"seeds": [0], "num_tasks": 4, "max_new_tokens": 8}
    assert EvalConfig(mix={"lookup": 1.0, "swe": 0}, **base).mix == {"lookup": 1.0}
    with pytest.raises(ValueError, match="at least one suite with a weight above 0"):
        EvalConfig(mix={"swe": 0}, **base)
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        EvalConfig(mix={"swe": -1}, **base)
    assert compose(["recipe=qwen_coder_7b_mini"]).stages.rl.mix == {"lookup": 0.2}
