"""Async RL on a cluster as a RayJob on KubeRay (harnessrl/cluster/rayjob.py): the manifest's groups,
placement and limits, and the create-and-wait logic against a fake Kubernetes API, KubeRay's known
traps included (a driver that failed while the RayJob says Running, #2154; a finished job whose
driver did not succeed, #3211)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harnessrl.cluster import rayjob
from harnessrl.config import ConfigError, RayJobSlice, compose
from harnessrl.metrics import read_metrics
from pipelines.routing import stage_slice
from tests.conftest import SMOKE, needs_bwrap, stage_on_base

ASYNC = ["stages.rl.mode=async", "stages.rl.monitors.warmup_steps=0"]


def on_cluster(pvc: Path, *more: str) -> list[str]:
    """The smoke recipe's async RL on the GPU cluster's infra, the shared PVC in `pvc`. Its placement
    is left empty: the fake below runs the driver on a local Ray, which advertises no custom resources."""
    return [*SMOKE, "infra=gpu_cluster", f"infra.pvc.mount_path={pvc}", "infra.rayjob.poll_s=0.2",
            "stages.long_horizon.mode=async", *ASYNC, *more]  # fmt: skip


class FakeKube:
    """A recorded stub of the Kubernetes custom-objects calls the stage makes (create, get, delete on
    rayjobs), standing in for an API server with KubeRay; it is not a cluster. On create it runs the
    RayJob's entrypoint as a local process, as KubeRay's submitter would on the head (the driver then
    starts a local Ray, since no RAY_ADDRESS is set), and its status follows that process. `mode`
    scripts KubeRay's traps: "running-after-failure" keeps jobDeploymentStatus Running after the
    driver failed (#2154); "complete-after-failure" reports Complete for a failed driver (#3211)."""

    def __init__(self, mode: str = "run") -> None:
        self.mode, self.calls, self.objects, self.proc = mode, [], {}, None

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        self.calls.append(("create", body["metadata"]["name"]))
        self.objects[body["metadata"]["name"]] = body
        argv = [sys.executable, *shlex.split(body["spec"]["entrypoint"])[1:]]
        if self.mode != "run":  # the traps: a driver that fails at once
            argv = [sys.executable, "-c", "raise SystemExit('driver: out of GPU memory')"]
        self.proc = subprocess.Popen(argv, env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"})
        return body

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.calls.append(("get", name))
        code = self.proc.poll()
        status = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
        if code == 0:
            status = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}
        elif code is not None and self.mode == "running-after-failure":
            status = {"jobDeploymentStatus": "Running", "jobStatus": "FAILED", "message": f"driver exited {code}"}
        elif code is not None and self.mode == "complete-after-failure":
            status = {"jobDeploymentStatus": "Complete", "jobStatus": ""}
        return self.objects[name] | {"status": status}

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.calls.append(("delete", name))


def test_the_gpu_recipes_rayjob_has_its_groups_placement_and_limits() -> None:
    import ray

    cfg = compose(["recipe=qwen_coder_7b"])
    assert cfg.infra.rayjob.ray_version == ray.__version__  # KubeRay must know the image's Ray
    cluster = RayJobSlice.model_validate(stage_slice(cfg, "rl")["rayjob"])
    body = rayjob.manifest("harnessrl-rl-0", cluster, Path("/models/j/out/.launch.json"))
    spec = body["spec"]
    assert (spec["submissionMode"], spec["shutdownAfterJobFinishes"]) == ("K8sJobMode", True)  # not SidecarMode: #4945
    assert (
        spec["activeDeadlineSeconds"] == cfg.infra.for_stage("rl").timeout_s and spec["ttlSecondsAfterFinished"] == 600
    )
    assert spec["entrypoint"] == "python -m harnessrl.cluster.rayjob /models/j/out/.launch.json"
    assert "HF_HUB_OFFLINE" in spec["runtimeEnvYAML"]
    ray_spec = spec["rayClusterSpec"]
    head = ray_spec["headGroupSpec"]["template"]["spec"]
    assert head["nodeSelector"] == {"harnessrl.io/pool": "cpu"}  # the driver orchestrates; the ranks train
    groups = {g["groupName"]: g for g in ray_spec["workerGroupSpecs"]}
    assert set(groups) == {"trainer", "rollout", "env"}
    for name, want in (("trainer", "gpu-h100"), ("rollout", "gpu-h100"), ("env", "cpu")):
        pod = groups[name]["template"]["spec"]
        assert pod["nodeSelector"] == {"harnessrl.io/pool": want} and pod["serviceAccountName"] == "pipeline-runner"
        assert json.loads(json.loads(groups[name]["rayStartParams"]["resources"])) == {name: 8}
        assert {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]} >= {"/models"}
    for name in ("trainer", "rollout"):
        assert groups[name]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    # What RL asks each actor for is what a group advertises: 8 rollout workers on 8 `rollout`, 32 env on 4 x 8.
    rl_cfg = cfg.stages.rl
    assert (
        rl_cfg.rollout_workers * rl_cfg.placement.rollout["rollout"]
        <= cfg.infra.rayjob.workers["rollout"].resources["rollout"]
    )
    env = cfg.infra.rayjob.workers["env"]
    assert rl_cfg.env_workers * rl_cfg.placement.env["env"] <= env.replicas * env.resources["env"]
    trainer = cfg.infra.rayjob.workers["trainer"]
    assert rl_cfg.trainer_world_size * rl_cfg.placement.trainer["trainer"] <= trainer.resources["trainer"]


def test_a_placement_no_group_advertises_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"^stages\.rl\.placement\.env: no infra\.rayjob worker group advertises \['gpu_env'\]"
    ):
        compose(["recipe=qwen_coder_7b", "~stages.rl.placement.env.env", "+stages.rl.placement.env.gpu_env=1"])
    with pytest.raises(ConfigError, match=r"^stages\.rl\.placement\.env: 32 actors x 2\.0 env need more than the 32"):
        compose(["recipe=qwen_coder_7b", "stages.rl.placement.env.env=2"])  # 4 groups x 8: actors would pend
    with pytest.raises(ConfigError, match=r"^stages\.rl: placement\.trainer places trainer ranks"):
        compose(["recipe=qwen_coder_7b", "stages.rl.trainer_world_size=1"])
    with pytest.raises(ConfigError, match=r"^infra\.rayjob: no enabled RL stage runs in mode async"):
        compose([*SMOKE, "infra=gpu_cluster"])


@pytest.mark.parametrize(("trap", "why"), [("running-after-failure", "jobStatus FAILED, jobDeploymentStatus Running"),
                                            ("complete-after-failure", "without its driver succeeding")])  # fmt: skip
def test_a_failed_driver_fails_the_stage_whatever_the_deployment_says(
    tiny_base: dict, tmp_path: Path, kube_api, trap: str, why: str
) -> None:
    api = kube_api(FakeKube(trap))
    with pytest.raises(RuntimeError, match=why):
        stage_on_base(tiny_base, "rl", tmp_path / "rl", on_cluster(tmp_path / "pvc"))
    assert not (tmp_path / "rl").exists() and api.calls[0][0] == "create"


@needs_bwrap
def test_async_rl_runs_as_a_rayjob_and_publishes_its_checkpoint(tiny_base: dict, tmp_path: Path, kube_api) -> None:
    api = kube_api(FakeKube("run"))
    stage_on_base(tiny_base, "rl", tmp_path / "rl", on_cluster(tmp_path / "pvc"))
    assert api.calls[0][0] == "create" and api.calls[-1][0] == "get" and "delete" not in [c[0] for c in api.calls]
    manifest = json.loads((tmp_path / "rl" / "manifest.json").read_text())
    assert manifest["stage"] == "rl" and (tmp_path / "rl" / "model.safetensors").is_file()
    rows = read_metrics(tmp_path / "rl" / "metrics.jsonl")
    assert len(rows) == compose(on_cluster(tmp_path)).stages.rl.steps and all("staleness" in r for r in rows)
    assert list((tmp_path / "pvc" / "harnessrl-jobs").iterdir()) == []
