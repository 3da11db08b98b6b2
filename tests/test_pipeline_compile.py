"""The compiled KFP v2 IR has the recipe's DAG edges and the Kubernetes settings the config asks for,
and compiling builds nothing: the data version comes from the data config's DVC pointer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harnessrl.cli import main
from harnessrl.config import RayJobSlice, compose
from harnessrl.data.build import folder_name
from pipelines.routing import data_rayjob, stage_slice

REPO = Path(__file__).resolve().parent.parent


def compile_ir(tmp_path: Path, *overrides: str) -> tuple[dict, dict]:
    """Compile with `overrides`, from the repo root as a user does (the data pointers are the repo's)."""
    out = tmp_path / "pipeline.yaml"
    assert main(["compile", *overrides, "-o", str(out)]) == 0
    docs = list(yaml.safe_load_all(out.read_text()))
    return docs[0], docs[1] if len(docs) > 1 else {}  # the platform spec is there only when asked for


def data_step_inputs(spec: dict) -> dict[str, str]:
    params = spec["root"]["dag"]["tasks"]["data"]["inputs"]["parameters"]
    return {k: v["runtimeValue"]["constant"] for k, v in params.items()}


def edges(spec: dict) -> dict[str, list[str]]:
    tasks = spec["root"]["dag"]["tasks"]
    return {name: t.get("dependentTasks", []) for name, t in tasks.items()}


def test_dag_edges_follow_the_chain(tmp_path: Path) -> None:
    spec, _ = compile_ir(tmp_path, "recipe=tiny")
    assert edges(spec) == {
        "data": [],
        "base": ["data"],
        "cpt": ["base", "data"],
        "sft": ["cpt", "data"],
        "rl": ["data", "sft"],
        "long-horizon": ["data", "rl"],
        "evaluate": ["data", "long-horizon"],
    }
    rl_in = spec["root"]["dag"]["tasks"]["rl"]["inputs"]
    assert rl_in["artifacts"]["parent"]["taskOutputArtifact"] == {
        "outputArtifactKey": "checkpoint",
        "producerTask": "sft",
    }
    # Each task carries its own config slice, the data and its md5 from the data step, and the code
    # hash: the cache key.
    assert rl_in["artifacts"]["data"]["taskOutputArtifact"] == {"outputArtifactKey": "dataset", "producerTask": "data"}
    params = rl_in["parameters"]
    assert json.loads(params["config"]["runtimeValue"]["constant"]) == stage_slice(compose(["recipe=tiny"]), "rl")
    assert params["data_md5"]["taskOutputParameter"] == {"outputParameterKey": "Output", "producerTask": "data"}
    assert len(params["code_hash"]["runtimeValue"]["constant"]) == 64


def _data_folder_times() -> dict[Path, int]:
    """What is in data/ now; a clean clone has no data/ at all (CI's case)."""
    folder = REPO / "data"
    return {p: p.stat().st_mtime_ns for p in folder.iterdir()} if folder.is_dir() else {}


def test_compile_takes_the_data_version_from_its_pointer_and_writes_nothing(tmp_path: Path, capsys) -> None:
    cfg = compose([])
    pointer = REPO / "data.dvc"  # the default recipe's, at the root
    assert yaml.safe_load(pointer.read_text())["outs"][0]["path"] == f"data/{folder_name(cfg.data)}"
    before = _data_folder_times()
    spec, _ = compile_ir(tmp_path, "recipe=tiny")
    data = data_step_inputs(spec)
    assert data["md5"] == yaml.safe_load(pointer.read_text())["outs"][0]["md5"]
    assert data["remote"] == cfg.store.data_remote and data["folder"] == ""  # no path of this machine's
    assert data["rayjob"] == ""  # no infra.rayjob, and nothing to build
    assert json.loads(data["config"]) == cfg.data.model_dump()
    assert "pulled from runs/dvc-remote" in capsys.readouterr().out
    assert _data_folder_times() == before, "compile wrote into data/"
    assert [p.name for p in REPO.glob(".data*")] == [] and list(tmp_path.iterdir()) == [tmp_path / "pipeline.yaml"]


def test_a_data_config_without_a_pointer_is_built_by_the_data_step(tmp_path: Path, capsys) -> None:
    spec, platform = compile_ir(tmp_path, "recipe=qwen_coder_7b")
    data = data_step_inputs(spec)
    cfg = compose(["recipe=qwen_coder_7b"])
    assert data["md5"] == "" and data["remote"] == cfg.store.data_remote.rstrip("/") == "s3://harnessrl-artifacts/dvc"
    assert json.loads(data["store"])["retry_mode"] == "adaptive"
    assert "will build it and push it to s3://harnessrl-artifacts/dvc (as a RayJob: head + env x4)" in (
        capsys.readouterr().out
    )
    assert not (REPO / "data" / folder_name(cfg.data)).exists()
    # It builds as a RayJob: the head and the CPU-only group, and its task waits as long as that may take.
    job = RayJobSlice.model_validate_json(data["rayjob"])
    assert job == data_rayjob(cfg) and list(job.rayjob.workers) == ["env"]
    data_timeout = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-data"]
    assert data_timeout["activeDeadlineSeconds"] == str(int(cfg.infra.for_stage("data").timeout_s * 1.2) + 600)


def test_compile_image_flag_overrides_the_image(tmp_path: Path) -> None:
    ref = "ghcr.io/harnessrl/harnessrl@sha256:" + "a" * 64
    spec, _ = compile_ir(tmp_path, "recipe=qwen_coder_7b", "--image", ref)
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert images == {ref}


def test_disabled_stage_is_bridged_to_the_previous_enabled_one(tmp_path: Path) -> None:
    off = ["stages.cpt.enabled=false", "stages.long_horizon.enabled=false", "stages.eval.long_horizon_tasks=0"]
    spec, _ = compile_ir(tmp_path, *off)
    assert edges(spec) == {"data": [], "base": ["data"], "sft": ["base", "data"], "rl": ["data", "sft"],
                           "evaluate": ["data", "rl"]}  # fmt: skip


def test_gpu_recipe_compiles_kubernetes_settings_from_config(tmp_path: Path) -> None:
    spec, platform = compile_ir(tmp_path, "recipe=qwen_coder_7b")  # SFT on one 8-GPU node (CPT: a TrainJob)
    cfg = compose(["recipe=qwen_coder_7b"])
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    sft = k8s["exec-sft"]
    want = cfg.infra.for_stage("sft")
    assert sft["nodeSelector"]["labels"] == want.node_selector
    assert sft["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert sft["emptyDirMounts"] == [
        {"medium": "Memory", "mountPath": "/dev/shm", "sizeLimit": "64Gi", "volumeName": "dshm"}
    ]
    assert sft["pvcMount"][0]["mountPath"] == "/models"
    assert sft["secretAsEnv"][0]["secretName"] == "harnessrl-s3"
    assert sft["activeDeadlineSeconds"] == str(want.timeout_s)

    container = spec["deploymentSpec"]["executors"]["exec-sft"]["container"]
    assert container["image"] == cfg.infra.image
    res = container["resources"]
    assert res["accelerator"]["resourceType"] == "nvidia.com/gpu" and res["accelerator"]["resourceCount"] == "8"
    assert res["resourceCpuRequest"] == "96" and res["resourceMemoryRequest"] == "1600G"
    assert spec["root"]["dag"]["tasks"]["sft"]["retryPolicy"]["maxRetryCount"] == 2
    assert spec["defaultPipelineRoot"] == cfg.infra.pipeline_root
    # The image already has harnessrl: no pip install of kfp at task start.
    assert "pip install" not in " ".join(container["command"])


def test_local_infra_compiles_no_scheduling(tmp_path: Path) -> None:
    _, platform = compile_ir(tmp_path, "recipe=tiny")
    executors = platform.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {}).get("executors", {})
    assert executors == {}


@pytest.mark.parametrize("override", ["infra.resources.cpt.accelerator_count=2"])
def test_accelerator_count_without_type_is_rejected(override: str) -> None:
    from harnessrl.config import ConfigError

    with pytest.raises(ConfigError, match=r"infra\.resources\.cpt"):
        compose(["recipe=qwen_coder_7b", override, "infra.resources.cpt.accelerator_type=null"])
