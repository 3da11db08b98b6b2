"""Async RL on a cluster: a RayJob on KubeRay, created and waited on by the RL stage itself.
The DAG's data step, when it must build the data, runs its build the same way (`cpu_only` below).

The RayJob brings up a Ray cluster for the stage and runs its driver, `python -m
harnessrl.cluster.rayjob SPEC`, which is the stage's own `work(ctx)`: the RL loop, whose trainer
runs in the driver on the head pod, and whose Ray fleet (harnessrl/rl/fleet.py) joins the cluster
through RAY_ADDRESS. RL's `placement` sends the rollout workers and the environment workers to the
worker groups that advertise the resources it names (infra.rayjob.workers).

Known KubeRay traps, and what this module does about them:
- a RayJob reported Running after its driver failed (KubeRay #2154): the verdict reads `jobStatus`
  (the driver's own state) before `jobDeploymentStatus`, so a FAILED driver fails the stage at once;
- the submitter exiting 0 after a failed job (#3211): Complete counts as success only with
  `jobStatus: SUCCEEDED` and the driver's result file on the PVC;
- a SidecarMode RayJob that hangs if the submitter fails early (#4945): K8sJobMode, and a deadline
  (`activeDeadlineSeconds`, and the stage's own backstop) after which the RayJob is deleted.

KubeRay ships no Python models, so the manifest is a plain dict; tests check its fields.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from harnessrl.cluster import kube
from harnessrl.config import RayGroup, RayJobConfig, RayJobSlice
from harnessrl.stage import StageContext
from harnessrl.train.spec import read_spec, resolve, write_spec

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayjobs"
TARGETS = {
    "rl": "components.rl:work",
    "long_horizon": "components.long_horizon_rl:work",
    "data": "components.data:build_on_ray",
}


def cpu_only(ray: RayJobConfig) -> RayJobConfig:
    """The data step's RayJob (components/data.py): the head and only the worker groups without GPUs
    (e.g. `env`). Mining is CPU work, so no GPU node is held for data; with no such group, Ray's tasks
    run on the head alone."""
    return ray.model_copy(update={"workers": {n: g for n, g in ray.workers.items() if not g.gpus}})


def _pod(cluster: RayJobSlice, group: RayGroup, container: str) -> dict:
    """One Ray pod template: the image, the group's resources and placement, the PVC and /dev/shm."""
    limits = {"nvidia.com/gpu": str(group.gpus)} if group.gpus else {}
    requests = {k: v for k, v in (("cpu", group.cpu), ("memory", group.memory)) if v}
    volumes = [{"name": "shared", "persistentVolumeClaim": {"claimName": cluster.pvc.name}}]
    mounts = [{"name": "shared", "mountPath": cluster.pvc.mount_path}]
    if group.shm_size:  # vLLM and NCCL share memory; a pod's default /dev/shm is 64 MiB
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": group.shm_size}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    spec = {
        "serviceAccountName": cluster.rayjob.service_account,
        "containers": [
            {
                "name": container,
                "image": cluster.image,
                "resources": {"limits": limits | requests, "requests": requests},
                "volumeMounts": mounts,
                "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}, *kube.secret_env(cluster.secrets)],
            }
        ],
        "volumes": volumes,
    }
    if group.node_selector:
        spec["nodeSelector"] = group.node_selector
    if group.tolerations:
        spec["tolerations"] = [t.model_dump(exclude_none=True) for t in group.tolerations]
    return {"spec": spec}


def _start_params(group: RayGroup) -> dict[str, str]:
    # KubeRay passes these to `ray start`; custom resources go as a JSON string inside the string.
    params = {"num-gpus": str(group.gpus)}
    if group.resources:
        params["resources"] = json.dumps(json.dumps(group.resources, sort_keys=True))
    return params


def manifest(name: str, cluster: RayJobSlice, spec: Path) -> dict:
    """The RayJob for one RL stage run."""
    ray = cluster.rayjob
    workers = [
        {
            "groupName": group_name,
            "replicas": g.replicas,
            "minReplicas": g.replicas,
            "maxReplicas": g.replicas,
            "rayStartParams": _start_params(g),
            "template": _pod(cluster, g, "ray-worker"),
        }
        for group_name, g in ray.workers.items()
    ]
    job: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": ray.namespace, "labels": {"app.kubernetes.io/part-of": "harnessrl"}},
        "spec": {
            "entrypoint": shlex.join(["python", "-m", "harnessrl.cluster.rayjob", str(spec)]),
            "submissionMode": "K8sJobMode",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": ray.ttl_s_after_finished,
            "runtimeEnvYAML": "env_vars:\n  RAY_USAGE_STATS_ENABLED: '0'\n  HF_HUB_OFFLINE: '1'\n",
            "rayClusterSpec": {
                "rayVersion": ray.ray_version,
                "headGroupSpec": {
                    "rayStartParams": _start_params(ray.head),
                    "template": _pod(cluster, ray.head, "ray-head"),
                },
                "workerGroupSpecs": workers,
            },
        },
    }
    if cluster.timeout_s:
        job["spec"]["activeDeadlineSeconds"] = cluster.timeout_s
    return job


def example(stage: str, stage_slice: dict) -> dict:
    """The RayJob a stage would create, as `submit --dry-run` shows it (its name is a placeholder)."""
    cluster = RayJobSlice.model_validate(stage_slice["rayjob"])
    name = f"harnessrl-{stage.replace('_', '-')}-<run>"
    return manifest(name, cluster, Path(cluster.pvc.mount_path) / "harnessrl-jobs" / name / "out" / ".launch.json")


def verdict(obj: dict) -> tuple[bool | None, str]:
    """(True, _) when the driver succeeded, (False, why) when it or the deployment failed, else (None, state).
    The driver's `jobStatus` is read first: the deployment can say Running or Complete after a failed
    driver (KubeRay #2154, #3211)."""
    status = obj.get("status") or {}
    job, deployment = status.get("jobStatus", ""), status.get("jobDeploymentStatus", "")
    why = f"jobStatus {job or '-'}, jobDeploymentStatus {deployment or '-'}"
    if job in ("FAILED", "STOPPED") or deployment == "Failed":
        return False, f"{why}: {status.get('reason', '')} {status.get('message', '')}".rstrip()
    if job == "SUCCEEDED":
        return True, why
    if deployment == "Complete":  # finished, but the driver did not report success
        return False, f"{why}: the job finished without its driver succeeding"
    return None, why


def run(tag: str, ctx: StageContext, api: Any = None) -> dict:
    """Run the stage `tag` (an RL stage, or the data step's build) as a RayJob; returns the driver's metrics."""
    cluster = RayJobSlice.model_validate(ctx.cfg["rayjob"])
    name = kube.job_name(tag, ctx)
    job_ctx = kube.job_folder(cluster.pvc, name, ctx)
    # The driver runs the stage itself, not another RayJob.
    job_ctx = dataclasses.replace(job_ctx, cfg={k: v for k, v in ctx.cfg.items() if k != "rayjob"})
    spec, result = write_spec(TARGETS[tag], job_ctx)
    api = api or kube.kube_api()
    namespace, say = cluster.rayjob.namespace, kube.sayer(tag)
    say(f"creating RayJob {namespace}/{name}: {groups(cluster)}")
    deadline = cluster.timeout_s * 1.1 if cluster.timeout_s else 0  # a backstop after KubeRay's own
    body = manifest(name, cluster, spec)
    ref = (GROUP, VERSION, namespace, PLURAL, name)
    kube.run_job(api, ref, body, verdict, deadline, cluster.rayjob.poll_s, say, owner=kube.pod_owner(namespace))
    return kube.publish(job_ctx, ctx, spec, result, f"RayJob {namespace}/{name}")


def groups(cluster: RayJobSlice) -> str:
    """The RayJob's pods in words: `head + env x4`, or `head alone`."""
    workers = [f"{n} x{g.replicas}" for n, g in cluster.rayjob.workers.items()]
    return " + ".join(["head", *workers]) if workers else "head alone"


def _driver(spec_path: str) -> None:
    """The RayJob's entrypoint: the stage's `work(ctx)` on the job's folder, seeded as run_stage seeds
    it; its metrics go to the result file that the stage's pod reads."""
    import torch

    target, ctx, result = read_spec(spec_path)
    torch.manual_seed(ctx.cfg["seed"])
    result.write_text(json.dumps(resolve(target)(ctx)))


if __name__ == "__main__":
    _driver(sys.argv[1])
