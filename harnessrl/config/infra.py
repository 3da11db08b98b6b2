"""Where the stages run: Kubernetes placement, the TrainJob and RayJob settings, the artifact store;
and the parts of a stage's config slice that carry them to the stage (pipelines/routing.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from harnessrl.config.base import Strict
from harnessrl.config.stages import STAGES


class Toleration(Strict):
    key: str
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class StageResources(Strict):
    """Where and how one stage's pod runs on Kubernetes. Ignored by the local runner."""

    node_selector: dict[str, str] = Field({})
    tolerations: list[Toleration] = Field([])
    accelerator_type: str | None = None
    accelerator_count: int = Field(0, ge=0)
    cpu: str | None = Field(None, description="CPU request, e.g. '8'")
    memory: str | None = Field(None, description="memory request, e.g. '64G'")
    shm_size: str | None = Field(None, description="size of a memory-backed /dev/shm, e.g. '16Gi'")
    timeout_s: int = Field(0, ge=0, description="0 means no timeout")
    retries: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _accelerator_pair(self) -> StageResources:
        if self.accelerator_count and not self.accelerator_type:
            raise ValueError("accelerator_count needs accelerator_type")
        return self


class PVCConfig(Strict):
    name: str
    mount_path: str


class SecretEnv(Strict):
    secret: str
    env: dict[str, str] = Field(description="secret key -> environment variable")


class TrainJobConfig(Strict):
    """Multi-node CPT and SFT as Kubeflow Trainer TrainJobs (harnessrl/cluster/trainjob.py)."""

    namespace: str = Field("kubeflow", description="where the TrainJobs are created")
    runtime: str = Field("torch-distributed", description="the ClusterTrainingRuntime they run on")
    service_account: str = Field("pipeline-runner", description="the training pods' account (IRSA: S3 access)")
    poll_s: float = Field(30.0, gt=0, description="seconds between status reads while waiting")


class RayGroup(Strict):
    """One group of a KubeRay cluster's pods, and the Ray resources each advertises."""

    replicas: int = Field(1, gt=0)
    resources: dict[str, float] = Field(
        {}, description="custom Ray resources each pod advertises, e.g. {rollout: 1}: what RL's placement asks for"
    )
    gpus: int = Field(0, ge=0, description="nvidia.com/gpu per pod")
    cpu: str | None = None
    memory: str | None = None
    shm_size: str | None = Field(None, description="a memory-backed /dev/shm, e.g. '64Gi' (vLLM, NCCL)")
    node_selector: dict[str, str] = Field({})
    tolerations: list[Toleration] = Field([])


class RayJobConfig(Strict):
    """Async RL on a cluster: a RayJob on KubeRay (harnessrl/cluster/rayjob.py). The driver, the RL
    loop, runs on the head (and trains there when trainer_world_size is 1); the trainer's ranks, the
    rollout and the environment workers run on the worker groups that RL's placement names."""

    namespace: str = "kubeflow"
    ray_version: str = Field(description="the Ray in infra.image, which KubeRay must know")
    service_account: str = Field("pipeline-runner", description="the Ray pods' account (IRSA: S3 access)")
    ttl_s_after_finished: int = Field(600, ge=0, description="how long the finished RayJob's cluster stays, for logs")
    poll_s: float = Field(30.0, gt=0, description="seconds between status reads while waiting")
    head: RayGroup = Field(description="the driver's pod: the RL loop")
    workers: dict[str, RayGroup] = Field(description="worker groups by name, e.g. trainer, rollout and env")


class InfraConfig(Strict):
    name: str
    image: str = Field(description="container image with harnessrl installed, for cluster runs")
    pipeline_root: str | None = Field(None, description="s3://... or a PVC path for artifacts")
    pvc: PVCConfig | None = None
    secrets: list[SecretEnv] = Field([])
    resources: dict[str, StageResources] = Field(description="per stage; the key 'default' applies to all")
    trainjob: TrainJobConfig | None = Field(
        None, description="how CPT and SFT run past one node; None: they never do (world_size <= GPUs per pod)"
    )
    rayjob: RayJobConfig | None = Field(None, description="how async RL runs on a cluster; None: in the stage's pod")
    placement_timeout_s: float = Field(
        600,
        gt=0,
        description="how long async RL waits for Ray nodes that offer its placement, on a cluster that "
        "can still grow (a RayJob's workers, an autoscaler), before it fails naming what is missing",
    )

    @model_validator(mode="after")
    def _known_stages(self) -> InfraConfig:
        known = ["data", *STAGES, "live"]  # the data step and the live cycle are scheduled like stages
        unknown = set(self.resources) - set(known) - {"default"}
        if unknown:
            raise ValueError(f"resources has unknown stage(s) {sorted(unknown)}; known: {known}")
        return self

    def for_stage(self, stage: str) -> StageResources:
        """The stage's own entry, else the default, else nothing requested."""
        return self.resources.get(stage) or self.resources.get("default") or StageResources()


# ----------------------------------------------------------------------------- a stage's job, in its slice


class TrainJobSlice(Strict):
    """The `cluster` part of a CPT or SFT stage's config slice (pipelines/routing.py): what the stage
    needs to create its TrainJob (harnessrl/cluster/trainjob.py) when its ranks span several nodes."""

    image: str
    resources: StageResources = Field(description="each node's pod: the stage's infra.resources")
    pvc: PVCConfig
    secrets: list[SecretEnv]
    trainjob: TrainJobConfig
    nodes: int = Field(gt=1, description="nodes the stage's world_size spans")


class RayJobSlice(Strict):
    """The `rayjob` part of an async RL stage's config slice (pipelines/routing.py): what the stage
    needs to create its RayJob (harnessrl/cluster/rayjob.py)."""

    image: str
    pvc: PVCConfig
    secrets: list[SecretEnv]
    timeout_s: int = Field(ge=0, description="the stage's infra.resources timeout; 0: none")
    rayjob: RayJobConfig


# ----------------------------------------------------------------------------- store


class StoreConfig(Strict):
    """Where artifacts (checkpoints, metrics, reports) and the DVC data remote live.

    A path is a local directory; `s3://bucket/prefix` is S3 or an S3-compatible server at
    `endpoint_url`. Credentials come from the environment (AWS_ACCESS_KEY_ID, ... or IRSA), never here.
    """

    uri: str = Field("runs/store", description="artifact store: a local directory or s3://bucket/prefix")
    data_remote: str = Field(
        "runs/dvc-remote", description="DVC remote for data/: a local directory or s3://bucket/prefix"
    )
    endpoint_url: str | None = Field(None, description="S3-compatible endpoint, e.g. http://minio:9000; None: AWS")
    region: str | None = None
    retry_mode: Literal["standard", "adaptive"] = "standard"
    max_attempts: int = Field(
        10, ge=0, description="botocore retries.max_attempts: retries per request after the first try"
    )
    connect_timeout_s: float = Field(10.0, gt=0)
    read_timeout_s: float = Field(60.0, gt=0)
    multipart_threshold_mb: int = Field(64, ge=5, description="files at least this big go up in parts")
    multipart_chunksize_mb: int = Field(16, ge=5, description="part size; S3's minimum is 5 MiB")
    max_concurrency: int = Field(8, gt=0, description="parallel part uploads/downloads per file")
