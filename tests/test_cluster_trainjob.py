"""Multi-node CPT as a Kubeflow Trainer TrainJob (harnessrl/cluster/trainjob.py): the manifest against the
Trainer API's models, and the create-and-wait logic against a fake Kubernetes API, through success,
failure with a reason, a deadline, and deletion when the stage is cancelled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harnessrl.cluster import kube, trainjob
from harnessrl.config import ConfigError, TrainJobSlice, compose
from harnessrl.metrics import read_metrics
from harnessrl.train import distributed
from pipelines.routing import stage_slice
from tests.conftest import SMOKE, stage_on_base

TWO_NODES = ["stages.cpt.world_size=2", "stages.cpt.zero_stage=2", "stages.cpt.micro_batch_size=2"]


def on_cluster(pvc: Path, *more: str) -> list[str]:
    """The smoke recipe on the GPU cluster's infra, one GPU per node, the shared PVC in `pvc`."""
    return [*SMOKE, "infra=gpu_cluster", f"infra.pvc.mount_path={pvc}", "infra.resources.cpt.accelerator_count=1",
            "infra.trainjob.poll_s=0.2", "infra.rayjob=null", *TWO_NODES, *more]  # fmt: skip


class FakeKube:
    """A recorded stub of the Kubernetes custom-objects calls the stage makes (create, get, delete on
    trainjobs), standing in for an API server with Kubeflow Trainer. It says so here because it is not
    a cluster: on create it does what the torch runtime would do with the TrainJob, and starts each
    node's `trainer.command` as a local process with torchrun's PET_* variables (nodes, node rank,
    master on loopback). Its status conditions follow those processes. `mode` scripts the other
    outcomes: "fail" reports Failed with a reason, "hang" never finishes, "cancel" sends this process
    SIGTERM on the second status read, as KFP does to a cancelled task's pod."""

    def __init__(self, mode: str = "run") -> None:
        self.mode, self.calls, self.procs, self.objects = mode, [], [], {}

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        self.calls.append(("create", namespace, body["metadata"]["name"]))
        self.objects[body["metadata"]["name"]] = body
        if self.mode == "run":
            spec, port = body["spec"]["trainer"], distributed.free_port()
            for rank in range(spec["numNodes"]):
                env = os.environ | {"PET_NNODES": str(spec["numNodes"]), "PET_NPROC_PER_NODE": str(spec["numProcPerNode"]),
                                    "PET_NODE_RANK": str(rank), "PET_MASTER_ADDR": "127.0.0.1",
                                    "PET_MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}  # fmt: skip
                self.procs.append(subprocess.Popen([sys.executable, *spec["command"][1:]], env=env))
        return body

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.calls.append(("get", namespace, name))
        gets = sum(1 for c in self.calls if c[0] == "get")
        if self.mode == "cancel" and gets == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        conditions = [{"type": "Created", "status": "True", "reason": "JobSetCreated", "message": ""}]
        if self.mode == "fail":
            conditions.append({"type": "Failed", "status": "True", "reason": "FailedScheduling",
                               "message": "0/3 nodes have 1 free nvidia.com/gpu"})  # fmt: skip
        elif self.mode == "run" and all(p.poll() is not None for p in self.procs):
            codes = [p.returncode for p in self.procs]
            done = "Complete" if codes == [0] * len(codes) else "Failed"
            conditions.append(
                {"type": done, "status": "True", "reason": "JobsCompleted", "message": f"exit codes {codes}"}
            )
        return self.objects[name] | {"status": {"conditions": conditions}}

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.calls.append(("delete", namespace, name))


def test_the_gpu_recipes_trainjob_validates_and_carries_its_settings() -> None:
    from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob

    cfg = compose(["recipe=qwen_coder_7b"])
    cluster = TrainJobSlice.model_validate(stage_slice(cfg, "cpt")["cluster"])
    body = trainjob.manifest("harnessrl-cpt-0", cluster, cfg.stages.cpt.world_size, Path("/models/j/out/.launch.json"))
    TrainerV1alpha1TrainJob.from_dict(body)  # the Trainer API's own model takes it back
    spec, res = body["spec"], cfg.infra.for_stage("cpt")
    assert spec["runtimeRef"]["name"] == "torch-distributed" and spec["activeDeadlineSeconds"] == res.timeout_s
    trainer = spec["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 8)  # world_size 16 = 2 nodes x 8 GPUs
    assert trainer["resourcesPerNode"] == {
        "limits": {"nvidia.com/gpu": "8"},
        "requests": {"cpu": "96", "memory": "1600G"},
    }
    assert trainer["image"] == cfg.infra.image and trainer["command"][-2:] == [
        "harnessrl.train.launch",
        "/models/j/out/.launch.json",
    ]
    pod = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]  # fmt: skip
    assert pod["nodeSelector"] == res.node_selector and pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert pod["serviceAccountName"] == "pipeline-runner"  # IRSA: the pods reach S3 as the pipeline role
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in pod["volumes"]
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts == {"/dev/shm", cfg.infra.pvc.mount_path}
    assert {e["name"] for e in pod["containers"][0]["env"]} == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}


def test_the_compiled_stage_only_creates_and_waits_on_the_default_pool(tmp_path: Path) -> None:
    import yaml

    from harnessrl.cli import main

    assert main(["compile", "recipe=qwen_coder_7b", "-o", str(tmp_path / "p.yaml")]) == 0
    spec, platform = yaml.safe_load_all((tmp_path / "p.yaml").read_text())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    cpt_pod = executors["exec-cpt"]
    assert cpt_pod["nodeSelector"]["labels"] == {"harnessrl.io/pool": "cpu"}  # no GPUs for the waiter
    for stage in ("rl", "long-horizon"):  # the RL stages wait on their RayJobs there too
        assert executors[f"exec-{stage}"]["nodeSelector"]["labels"] == {"harnessrl.io/pool": "cpu"}
    assert executors["exec-sft"]["nodeSelector"]["labels"] == {"harnessrl.io/pool": "gpu-h100"}  # one node: itself
    assert "accelerator" not in spec["deploymentSpec"]["executors"]["exec-cpt"]["container"].get("resources", {})
    assert cpt_pod["pvcMount"][0]["mountPath"] == "/models"  # it stages the job's files on the PVC
    assert cpt_pod["activeDeadlineSeconds"] == str(int(172800 * 1.2) + 600)  # outlasts the TrainJob's deadline


def test_whole_nodes_and_a_trainjob_are_required_past_one_node() -> None:
    with pytest.raises(ConfigError, match=r"^stages\.cpt\.world_size: 12 ranks .* is not a whole number of nodes"):
        compose(["recipe=qwen_coder_7b", "stages.cpt.world_size=12"])
    with pytest.raises(ConfigError, match=r"^stages\.cpt\.world_size: 16 ranks .* needs a TrainJob"):
        compose(["recipe=qwen_coder_7b", "infra.trainjob=null"])
    assert "cluster" not in stage_slice(compose(["recipe=qwen_coder_7b"]), "sft")  # 8 ranks: one node


def test_a_two_node_trainjob_trains_as_one_node_with_two_ranks(tiny_base: dict, tmp_path: Path, kube_api) -> None:
    stage_on_base(tiny_base, "cpt", tmp_path / "local", [*SMOKE, *TWO_NODES])  # torchrun on this node, 2 ranks
    api = kube_api(FakeKube("run"))
    stage_on_base(tiny_base, "cpt", tmp_path / "job", on_cluster(tmp_path / "pvc"))
    assert [c[0] for c in api.calls][:2] == ["create", "get"] and api.calls[-1][0] == "get"
    assert [m["loss"] for m in read_metrics(tmp_path / "job" / "metrics.jsonl")] == pytest.approx(
        [m["loss"] for m in read_metrics(tmp_path / "local" / "metrics.jsonl")], abs=1e-6
    )
    manifest = json.loads((tmp_path / "job" / "manifest.json").read_text())
    assert manifest["metrics"]["world_size"] == 2 and (tmp_path / "job" / "model.safetensors").is_file()
    assert list((tmp_path / "pvc" / "harnessrl-jobs").iterdir()) == []  # the job's folder and state are removed


def test_a_failed_trainjob_fails_the_stage_with_its_reason(tiny_base: dict, tmp_path: Path, kube_api) -> None:
    api = kube_api(FakeKube("fail"))
    with pytest.raises(RuntimeError, match=r"failed: FailedScheduling: 0/3 nodes have 1 free nvidia\.com/gpu"):
        stage_on_base(tiny_base, "cpt", tmp_path / "job", on_cluster(tmp_path / "pvc"))
    assert not (tmp_path / "job").exists()  # no half-written checkpoint
    assert "delete" not in [c[0] for c in api.calls]  # Trainer keeps a failed job for its logs


def test_past_the_deadline_the_trainjob_is_deleted(tiny_base: dict, tmp_path: Path, kube_api) -> None:
    api = kube_api(FakeKube("hang"))
    with pytest.raises(TimeoutError, match="did not finish in 1 s"):
        stage_on_base(
            tiny_base, "cpt", tmp_path / "job", on_cluster(tmp_path / "pvc", "infra.resources.cpt.timeout_s=1")
        )
    assert api.calls[-1][0] == "delete" and api.calls[-1][2] == api.calls[0][2]


def test_a_cancelled_stage_deletes_its_trainjob(tiny_base: dict, tmp_path: Path, kube_api) -> None:
    api = kube_api(FakeKube("cancel"))
    with pytest.raises(kube.Cancelled):
        stage_on_base(tiny_base, "cpt", tmp_path / "job", on_cluster(tmp_path / "pvc"))
    assert [c[0] for c in api.calls] == ["create", "get", "get", "delete"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the stage's handler is put back


def test_submit_dry_run_prints_the_trainjobs_and_submits_nothing(tmp_path: Path, capsys) -> None:
    import yaml

    from harnessrl.cli import main

    assert main(["submit", "--dry-run", "--recipe", "qwen_coder_7b", "-o", str(tmp_path / "p.yaml")]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("RayJob", "harnessrl-data-<run>"),  # no pointer for its data config: the data step builds it
        ("TrainJob", "harnessrl-cpt-<run>"),  # SFT fits one node: no TrainJob
        ("RayJob", "harnessrl-rl-<run>"),
        ("RayJob", "harnessrl-long-horizon-<run>"),
    ]
    assert (tmp_path / "p.yaml").is_file()
    assert main(["submit", "--recipe", "qwen_coder_7b", "-o", str(tmp_path / "p.yaml")]) == 2  # no --host
    assert "--host: required" in capsys.readouterr().err
