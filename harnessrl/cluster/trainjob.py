"""CPT and SFT past one node: a Kubeflow Trainer TrainJob, created and waited on by the stage itself.

KFP v2 has no ResourceOp. As in kubeflow/pipelines' pytorch-launcher sample, the stage's own pod
creates the custom resource with the Kubernetes client and waits on its conditions:

1. The job's folder goes on the shared PVC, which every node mounts: the data, the parent checkpoint,
   and the job's spec (harnessrl/train/launch.py's `write_spec`).
2. The TrainJob asks the torch runtime (a ClusterTrainingRuntime) for `nodes` pods of
   `world_size / nodes` GPUs. Each runs torchrun on the same entry point as a local run,
   `python -m harnessrl.train.launch SPEC`; the runtime sets torchrun's PET_* variables (the node
   count, this node's rank and the master's address).
3. The stage waits for the Complete or Failed condition. A failure raises with the TrainJob's reason;
   past the deadline, or when KFP cancels the stage (SIGTERM), the TrainJob is deleted first.
4. Rank 0 wrote the checkpoint and its metrics into the job's folder; the stage copies them into its
   output artifact, where the manifest is written as for any stage, and removes the folder.

The manifest is built from kubeflow-trainer-api's models, so it validates against the Trainer API.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harnessrl.config import PVCConfig, SecretEnv, StageResources, TrainJobConfig
from harnessrl.stage import StageContext

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
NODE = "node"  # the torch runtime's replicated job and container


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The `cluster` part of a stage's config slice (Config.stage_slice)."""

    image: str
    resources: StageResources
    pvc: PVCConfig
    secrets: list[SecretEnv]
    trainjob: TrainJobConfig
    nodes: int

    @classmethod
    def from_slice(cls, raw: dict) -> Cluster:
        return cls(
            image=raw["image"],
            resources=StageResources.model_validate(raw["resources"]),
            pvc=PVCConfig.model_validate(raw["pvc"]),
            secrets=[SecretEnv.model_validate(s) for s in raw["secrets"]],
            trainjob=TrainJobConfig.model_validate(raw["trainjob"]),
            nodes=raw["nodes"],
        )


def job_name(stage: str, out: Path) -> str:
    """A DNS label, unique per stage output (KFP gives every task run its own output path)."""
    return f"harnessrl-{stage}-{hashlib.sha256(str(out).encode()).hexdigest()[:10]}"


def manifest(name: str, cluster: Cluster, world_size: int, spec: Path) -> dict:
    """The TrainJob, validated by the Trainer API's own models, as the dict the API server takes."""
    from kubeflow_trainer_api import models as m

    res, per_node = cluster.resources, world_size // cluster.nodes
    quantity = m.IoK8sApimachineryPkgApiResourceQuantity
    limits = {res.accelerator_type: quantity(str(per_node))} if res.accelerator_type else {}
    requests = {k: quantity(v) for k, v in (("cpu", res.cpu), ("memory", res.memory)) if v}
    claim = m.IoK8sApiCoreV1PersistentVolumeClaimVolumeSource(claimName=cluster.pvc.name)
    volumes = [m.IoK8sApiCoreV1Volume(name="shared", persistentVolumeClaim=claim)]  # the job's folder
    mounts = [m.IoK8sApiCoreV1VolumeMount(name="shared", mountPath=cluster.pvc.mount_path)]
    if res.shm_size:  # NCCL's shared memory: the pod default of 64 MiB fails with "No space left on device"
        empty = m.IoK8sApiCoreV1EmptyDirVolumeSource(medium="Memory", sizeLimit=quantity(res.shm_size))
        volumes.append(m.IoK8sApiCoreV1Volume(name="dshm", emptyDir=empty))
        mounts.append(m.IoK8sApiCoreV1VolumeMount(name="dshm", mountPath="/dev/shm"))
    env = [
        m.IoK8sApiCoreV1EnvVar(name=var, valueFrom=m.IoK8sApiCoreV1EnvVarSource(
            secretKeyRef=m.IoK8sApiCoreV1SecretKeySelector(name=s.secret, key=key)))
        for s in cluster.secrets for key, var in s.env.items()
    ]  # fmt: skip
    pod = m.TrainerV1alpha1PodSpecPatch(
        nodeSelector=res.node_selector or None,
        tolerations=[m.IoK8sApiCoreV1Toleration(**t.model_dump(exclude_none=True)) for t in res.tolerations] or None,
        serviceAccountName=cluster.trainjob.service_account,
        volumes=volumes,
        containers=[m.TrainerV1alpha1ContainerPatch(name=NODE, volumeMounts=mounts, env=env or None)],
    )
    template = m.TrainerV1alpha1JobSetTemplatePatch(
        spec=m.TrainerV1alpha1JobSetSpecPatch(
            replicatedJobs=[
                m.TrainerV1alpha1ReplicatedJobPatch(
                    name=NODE,
                    template=m.TrainerV1alpha1JobTemplatePatch(
                        spec=m.TrainerV1alpha1JobSpecPatch(template=m.TrainerV1alpha1PodTemplatePatch(spec=pod))
                    ),
                )
            ]
        )
    )
    # The pods' placement, volumes and secrets go in as a patch of the runtime's "node" pod template.
    runtime = m.TrainerV1alpha1TrainingRuntimeSpecPatch(template=template)
    patch = m.TrainerV1alpha1RuntimePatch(manager="harnessrl", trainingRuntimeSpec=runtime)
    job = m.TrainerV1alpha1TrainJob(
        apiVersion=f"{GROUP}/{VERSION}",
        kind="TrainJob",
        metadata=m.IoK8sApimachineryPkgApisMetaV1ObjectMeta(
            name=name, namespace=cluster.trainjob.namespace, labels={"app.kubernetes.io/part-of": "harnessrl"}
        ),
        spec=m.TrainerV1alpha1TrainJobSpec(
            runtimeRef=m.TrainerV1alpha1RuntimeRef(name=cluster.trainjob.runtime),
            activeDeadlineSeconds=res.timeout_s or None,
            trainer=m.TrainerV1alpha1Trainer(
                image=cluster.image,
                # torchrun takes the node count, node rank and master from the runtime's PET_* variables.
                command=["python", "-m", "torch.distributed.run", "-m", "harnessrl.train.launch", str(spec)],
                numNodes=cluster.nodes,
                numProcPerNode=per_node,
                resourcesPerNode=m.IoK8sApiCoreV1ResourceRequirements(limits=limits or None, requests=requests or None),
                env=[m.IoK8sApiCoreV1EnvVar(name="HF_HUB_OFFLINE", value="1")],
            ),
            runtimePatches=[patch],
        ),
    )
    return job.to_dict()


def example(stage: str, stage_slice: dict) -> dict:
    """The TrainJob a stage would create, as `submit --dry-run` shows it: its name and job folder are
    placeholders, since KFP names the stage's output only when the run starts."""
    cluster = Cluster.from_slice(stage_slice["cluster"])
    name = f"harnessrl-{stage}-<run>"
    spec = Path(cluster.pvc.mount_path) / "harnessrl-jobs" / name / "out" / ".launch.json"
    return manifest(name, cluster, stage_slice["stage"]["world_size"], spec)


def kube_api() -> Any:
    """The Kubernetes custom-objects API: the pod's service account in a cluster, else the kube context."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except (config.ConfigException, FileNotFoundError) as e:
            raise RuntimeError(
                f"no Kubernetes context to create the TrainJob in (in-cluster or kubeconfig): {e}"
            ) from e
    return client.CustomObjectsApi()


class Cancelled(Exception):
    """KFP cancelled the stage (SIGTERM to its pod)."""


def wait(api: Any, namespace: str, name: str, deadline_s: float, poll_s: float, say: Callable[[str], None]) -> None:
    """Until the TrainJob's Complete or Failed condition is True. Raises RuntimeError on failure (with its
    reason), TimeoutError past `deadline_s` (0: none) and Cancelled on SIGTERM; the TrainJob is deleted
    on the last two, so no GPUs stay held by a stage that gave up."""
    started, last = time.time(), None

    def on_term(signum: int, frame: Any) -> None:
        raise Cancelled(f"stage cancelled (signal {signum})")

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        while True:
            obj = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
            for kind in ("Complete", "Failed"):
                if conditions.get(kind, {}).get("status") == "True":
                    if kind == "Complete":
                        return
                    c = conditions[kind]
                    raise RuntimeError(f"TrainJob {namespace}/{name} failed: {c.get('reason')}: {c.get('message')}")
            state = ", ".join(f"{t}={c.get('status')}" for t, c in sorted(conditions.items())) or "no conditions yet"
            if state != last:
                say(f"TrainJob {name}: {state}")
                last = state
            if deadline_s and time.time() - started > deadline_s:
                raise TimeoutError(f"TrainJob {namespace}/{name} did not finish in {deadline_s:.0f} s")
            time.sleep(poll_s)
    except (TimeoutError, Cancelled, KeyboardInterrupt):
        api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        say(f"TrainJob {name}: deleted")
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(target: str, ctx: StageContext, world_size: int, api: Any = None) -> dict:
    """Run `target` (module:function, as harnessrl/train/launch.py) as a TrainJob; returns rank 0's metrics."""
    from harnessrl.train.launch import write_spec

    cluster = Cluster.from_slice(ctx.cfg["cluster"])
    stage = target.split(":")[0].rsplit(".", 1)[-1]
    name = job_name(stage, ctx.out)
    folder = Path(cluster.pvc.mount_path) / "harnessrl-jobs" / name
    say = lambda text: print(f"[{stage}] {text}", flush=True)
    shutil.rmtree(folder, ignore_errors=True)  # a retried stage starts its job afresh
    shutil.copytree(ctx.data_dir, folder / "data")
    if ctx.parent is not None:
        shutil.copytree(ctx.parent, folder / "parent")
    (folder / "out").mkdir()
    job_ctx = StageContext(
        cfg=ctx.cfg,
        parent=folder / "parent" if ctx.parent is not None else None,
        out=folder / "out",
        data_dir=folder / "data",
        state_dir=folder / "state",
    )
    spec, result = write_spec(target, job_ctx)
    api = api or kube_api()
    namespace = cluster.trainjob.namespace
    body = manifest(name, cluster, world_size, spec)
    say(f"creating TrainJob {namespace}/{name}: {cluster.nodes} nodes x {world_size // cluster.nodes} GPUs")
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    # Trainer enforces activeDeadlineSeconds itself; our own deadline is a backstop a little later.
    deadline = cluster.resources.timeout_s * 1.1 if cluster.resources.timeout_s else 0
    wait(api, namespace, name, deadline, cluster.trainjob.poll_s, say)
    if not result.is_file():
        raise RuntimeError(f"TrainJob {namespace}/{name} completed but wrote no {result.name}: rank 0 did not finish")
    metrics = json.loads(result.read_text())
    spec.unlink()
    result.unlink()
    shutil.copytree(job_ctx.out, ctx.out, dirs_exist_ok=True)
    shutil.rmtree(folder, ignore_errors=True)
    return metrics
