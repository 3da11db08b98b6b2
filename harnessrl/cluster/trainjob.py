"""CPT and SFT past one node: a Kubeflow Trainer TrainJob, created and waited on by the stage itself.

The TrainJob asks the torch runtime (a ClusterTrainingRuntime) for `nodes` pods of `world_size / nodes`
GPUs. Each runs torchrun on the same entry point as a local run, `python -m harnessrl.train.launch
SPEC`; the runtime sets torchrun's PET_* variables (the node count, this node's rank, the master's
address). Rank 0 writes the checkpoint into the job's folder on the shared PVC. Creating, waiting,
deleting and publishing are kube.py's, shared with the RayJob of the RL stages.

The manifest is built from kubeflow-trainer-api's models, so it validates against the Trainer API.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harnessrl.cluster import kube
from harnessrl.config import TrainJobSlice
from harnessrl.stage import StageContext
from harnessrl.train.spec import write_spec

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
NODE = "node"  # the torch runtime's replicated job and container


def manifest(name: str, cluster: TrainJobSlice, world_size: int, spec: Path) -> dict:
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
    env = [m.IoK8sApiCoreV1EnvVar.from_dict(e) for e in kube.secret_env(cluster.secrets)]
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
    cluster = TrainJobSlice.model_validate(stage_slice["cluster"])
    name = f"harnessrl-{stage}-<run>"
    spec = Path(cluster.pvc.mount_path) / "harnessrl-jobs" / name / "out" / ".launch.json"
    return manifest(name, cluster, stage_slice["stage"]["world_size"], spec)


def run(target: str, ctx: StageContext, world_size: int, api: Any = None) -> dict:
    """Run `target` (module:function, as harnessrl/train/launch.py) as a TrainJob; returns rank 0's metrics."""
    cluster = TrainJobSlice.model_validate(ctx.cfg["cluster"])
    stage = target.split(":")[0].rsplit(".", 1)[-1]
    name = kube.job_name(stage, ctx)
    job_ctx = kube.job_folder(cluster.pvc, name, ctx)
    spec, result = write_spec(target, job_ctx)
    api = api or kube.kube_api()
    namespace, say = cluster.trainjob.namespace, kube.sayer(stage)
    say(f"creating TrainJob {namespace}/{name}: {cluster.nodes} nodes x {world_size // cluster.nodes} GPUs")
    # Trainer enforces activeDeadlineSeconds itself; our own deadline is a backstop a little later.
    deadline = cluster.resources.timeout_s * 1.1 if cluster.resources.timeout_s else 0
    body = manifest(name, cluster, world_size, spec)
    ref = (GROUP, VERSION, namespace, PLURAL, name)
    kube.run_job(api, ref, body, verdict, deadline, cluster.trainjob.poll_s, say, owner=kube.pod_owner(namespace))
    return kube.publish(job_ctx, ctx, spec, result, f"TrainJob {namespace}/{name}")


def verdict(obj: dict) -> tuple[bool | None, str]:
    """(True, _) when Complete, (False, why) when Failed, (None, state) while neither."""
    conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
    if conditions.get("Complete", {}).get("status") == "True":
        return True, "Complete"
    if (failed := conditions.get("Failed", {})).get("status") == "True":
        return False, f"{failed.get('reason')}: {failed.get('message')}"
    return None, ", ".join(f"{t}={c.get('status')}" for t, c in sorted(conditions.items())) or "no conditions yet"
