"""The recipe's chain as one KFP v2 pipeline.

data, then base -> cpt -> sft -> rl -> long_horizon -> eval, minus the stages the recipe turns off: a
stage takes the checkpoint of the previous *enabled* stage. The data step (components/data.py) hands
every stage the data folder as an artifact, with its md5. Every task gets only its own config slice,
the data and the code's hash as inputs, so kfp's cache re-runs exactly what changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from kfp import dsl, kubernetes

from components.base import base
from components.cpt import cpt
from components.data import data
from components.evaluate import evaluate
from components.long_horizon_rl import long_horizon
from components.rl import rl
from components.sft import sft
from harnessrl.config import Config, InfraConfig, StageResources
from pipelines.routing import data_rayjob, enabled_stages, runs_as_job, stage_slice

STAGE_FUNCS: dict[str, Callable] = {
    "data": data,
    "base": base,
    "cpt": cpt,
    "sft": sft,
    "rl": rl,
    "long_horizon": long_horizon,
    "eval": evaluate,
}
# The output each stage hands on: a model checkpoint, except eval's report.
OUTPUT_NAME = {stage: "checkpoint" for stage in STAGE_FUNCS} | {"data": "dataset", "eval": "report"}


@dataclass(frozen=True)
class DataSource:
    """Where the data step gets the data folder (components/data.py): a folder built on this machine
    (local runs), or the DVC remote, by md5 where a version was pushed (cluster runs)."""

    md5: str = ""  # "": no pushed version; the data step builds it and pushes it
    folder: str = ""
    remote: str = ""
    store: str = "{}"  # the StoreConfig, as JSON, for an S3 remote


def pipeline_name(cfg: Config) -> str:
    return f"harnessrl-{cfg.name}".replace("_", "-")


def build_pipeline(cfg: Config, source: DataSource, code_hash: str) -> Callable:
    """A @dsl.pipeline function for this recipe. Calling it under kfp.local runs it; compiling it
    gives the IR that the cluster runs: the same DAG either way."""
    # The image already holds harnessrl and kfp: no pip install at task start.
    components = {
        s: dsl.component(STAGE_FUNCS[s], base_image=cfg.infra.image, install_kfp_package=False)
        for s in ["data", *enabled_stages(cfg)]
    }

    def pipeline():
        data_task = data_step(components["data"], cfg, source, code_hash)
        prev = None
        for stage in enabled_stages(cfg):
            args = dict(
                config=json.dumps(stage_slice(cfg, stage), sort_keys=True),
                data=data_task.outputs["dataset"],
                data_md5=data_task.outputs["Output"],
                code_hash=code_hash,
            )
            if prev is not None:
                args["parent"] = prev.outputs["checkpoint"]
            task = components[stage](**args).set_display_name(stage)
            res = cfg.infra.for_stage(stage)
            if runs_as_job(cfg, stage):
                # Its TrainJob's or RayJob's pods hold the GPUs (harnessrl/cluster/); this task only
                # creates the job and waits, on the default pool, as long as the stage may take.
                timeout = job_wait_timeout(res.timeout_s)
                res = cfg.infra.for_stage("default").model_copy(update={"timeout_s": timeout, "retries": res.retries})
            schedule(task, res, cfg.infra)
            prev = task
        return prev.outputs[OUTPUT_NAME[stage]]

    # The pipeline's output is the last stage's: its manifest chain leads to every checkpoint.
    pipeline.__annotations__["return"] = dsl.Artifact if cfg.stages.eval.enabled else dsl.Model
    return dsl.pipeline(
        pipeline,
        name=pipeline_name(cfg),
        description=f"harnessrl recipe {cfg.name}",
        pipeline_root=cfg.infra.pipeline_root,
    )


def job_wait_timeout(timeout_s: int) -> int:
    """The timeout of a task that creates a job and waits on it: it outlasts the job's deadline (and the
    wait's backstop at 1.1x), since the task also copies the inputs and waits for the job to be scheduled."""
    return int(timeout_s * 1.2) + 600 if timeout_s else 0


def build_slice(cfg: Config, source: DataSource) -> str:
    """The data step's `rayjob` input: the RayJobSlice as JSON where it must build the data (no pushed
    version, no local folder) on a recipe with infra.rayjob, else "". A step that pulls the data gets
    "", so a change to the RayJob settings does not re-run it (nor, through a new artifact, the stages)."""
    job = data_rayjob(cfg) if not (source.md5 or source.folder) else None
    return json.dumps(job.model_dump(), sort_keys=True) if job else ""


def data_step(op: Callable, cfg: Config, source: DataSource, code_hash: str) -> dsl.PipelineTask:
    """The data task (components/data.py), scheduled. Where it builds the data as a RayJob, it waits as
    long as that job may take."""
    rayjob = build_slice(cfg, source)
    task = op(config=json.dumps(cfg.data.model_dump(), sort_keys=True), md5=source.md5, folder=source.folder,
              remote=source.remote, store=source.store, code_hash=code_hash, rayjob=rayjob)  # fmt: skip
    res = cfg.infra.for_stage("data")
    if rayjob:
        res = res.model_copy(update={"timeout_s": job_wait_timeout(res.timeout_s)})
    schedule(task.set_display_name("data"), res, cfg.infra)
    return task


def schedule(task: dsl.PipelineTask, res: StageResources, infra: InfraConfig) -> None:
    """Kubernetes placement and limits from config. The local runner ignores them; the IR keeps them."""
    for key, value in res.node_selector.items():
        kubernetes.add_node_selector(task, label_key=key, label_value=value)
    for t in res.tolerations:
        kubernetes.add_toleration(task, key=t.key, operator=t.operator, value=t.value, effect=t.effect)
    if res.accelerator_type:
        task.set_accelerator_type(res.accelerator_type).set_accelerator_limit(res.accelerator_count)
    if res.cpu:
        task.set_cpu_request(res.cpu)
    if res.memory:
        task.set_memory_request(res.memory)
    if res.shm_size:
        # PyTorch workers share tensors through /dev/shm, which defaults to 64 MiB in a pod.
        kubernetes.empty_dir_mount(
            task, volume_name="dshm", mount_path="/dev/shm", medium="Memory", size_limit=res.shm_size
        )
    if infra.pvc:
        kubernetes.mount_pvc(task, pvc_name=infra.pvc.name, mount_path=infra.pvc.mount_path)
    for s in infra.secrets:
        kubernetes.use_secret_as_env(task, secret_name=s.secret, secret_key_to_env=s.env)
    if res.timeout_s:
        kubernetes.set_timeout(task, res.timeout_s)
    if res.retries:
        task.set_retry(num_retries=res.retries, backoff_duration="30s", backoff_factor=2.0)
