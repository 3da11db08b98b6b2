"""The compiled KFP v2 IR has the recipe's DAG edges and the Kubernetes settings the config asks for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harnessrl.cli import main
from harnessrl.config import compose
from tests.conftest import SMALL_DATA


def compile_ir(tmp_path: Path, *overrides: str, data: Path | None = None) -> tuple[dict, dict]:
    """Compile with `overrides`; `data` is a folder already built from the same data config."""
    out = tmp_path / "pipeline.yaml"
    assert main(["compile", *overrides, f"data.dir={data or tmp_path / 'data'}", "-o", str(out)]) == 0
    docs = list(yaml.safe_load_all(out.read_text()))
    return docs[0], docs[1] if len(docs) > 1 else {}  # the platform spec is there only when asked for


def edges(spec: dict) -> dict[str, list[str]]:
    tasks = spec["root"]["dag"]["tasks"]
    return {name: t.get("dependentTasks", []) for name, t in tasks.items()}


def test_dag_edges_follow_the_chain(tmp_path: Path, default_data: Path) -> None:
    spec, _ = compile_ir(tmp_path, "recipe=tiny", data=default_data)
    assert edges(spec) == {
        "base": [],
        "cpt": ["base"],
        "sft": ["cpt"],
        "rl": ["sft"],
        "long-horizon": ["rl"],
        "evaluate": ["long-horizon"],
    }
    rl_in = spec["root"]["dag"]["tasks"]["rl"]["inputs"]
    assert rl_in["artifacts"]["parent"]["taskOutputArtifact"] == {
        "outputArtifactKey": "checkpoint",
        "producerTask": "sft",
    }
    # Each task carries its own config slice, the data md5 and the code hash: the cache key.
    params = rl_in["parameters"]
    assert json.loads(params["config"]["runtimeValue"]["constant"]) == compose(["recipe=tiny"]).stage_slice("rl")
    assert params["data_md5"]["runtimeValue"]["constant"].endswith(".dir")
    assert len(params["code_hash"]["runtimeValue"]["constant"]) == 64


def test_disabled_stage_is_bridged_to_the_previous_enabled_one(tmp_path: Path, default_data: Path) -> None:
    off = ["stages.cpt.enabled=false", "stages.long_horizon.enabled=false", "stages.eval.long_horizon_tasks=0"]
    spec, _ = compile_ir(tmp_path, *off, data=default_data)
    assert edges(spec) == {"base": [], "sft": ["base"], "rl": ["sft"], "evaluate": ["rl"]}


def test_gpu_recipe_compiles_kubernetes_settings_from_config(tmp_path: Path) -> None:
    spec, platform = compile_ir(tmp_path, "recipe=qwen_coder_7b", *SMALL_DATA)
    cfg = compose(["recipe=qwen_coder_7b", *SMALL_DATA])
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    cpt = k8s["exec-cpt"]
    want = cfg.infra.for_stage("cpt")
    assert cpt["nodeSelector"]["labels"] == want.node_selector
    assert cpt["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert cpt["emptyDirMounts"] == [
        {"medium": "Memory", "mountPath": "/dev/shm", "sizeLimit": "64Gi", "volumeName": "dshm"}
    ]
    assert cpt["pvcMount"][0]["mountPath"] == "/models"
    assert cpt["secretAsEnv"][0]["secretName"] == "harnessrl-s3"
    assert cpt["activeDeadlineSeconds"] == str(want.timeout_s)

    container = spec["deploymentSpec"]["executors"]["exec-cpt"]["container"]
    assert container["image"] == cfg.infra.image
    res = container["resources"]
    assert res["accelerator"]["resourceType"] == "nvidia.com/gpu" and res["accelerator"]["resourceCount"] == "8"
    assert res["resourceCpuRequest"] == "96" and res["resourceMemoryRequest"] == "1600G"
    assert spec["root"]["dag"]["tasks"]["cpt"]["retryPolicy"]["maxRetryCount"] == 2
    assert spec["defaultPipelineRoot"] == cfg.infra.pipeline_root
    # The image already has harnessrl: no pip install of kfp at task start.
    assert "pip install" not in " ".join(container["command"])


def test_local_infra_compiles_no_scheduling(tmp_path: Path, default_data: Path) -> None:
    _, platform = compile_ir(tmp_path, "recipe=tiny", data=default_data)
    executors = platform.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {}).get("executors", {})
    assert executors == {}


@pytest.mark.parametrize("override", ["infra.resources.cpt.accelerator_count=2"])
def test_accelerator_count_without_type_is_rejected(override: str) -> None:
    from harnessrl.config import ConfigError

    with pytest.raises(ConfigError, match=r"infra\.resources\.cpt"):
        compose(["recipe=qwen_coder_7b", *SMALL_DATA, override, "infra.resources.cpt.accelerator_type=null"])
