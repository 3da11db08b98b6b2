"""Which stages a recipe runs, what each is given, and where it runs: the routing the pipeline follows.

Every task gets only its stage's slice of the recipe (`stage_slice`), so kfp's cache re-runs exactly
what changed. A stage whose work needs more than its own pod runs it as a Kubernetes job that the pod
creates and waits on (harnessrl/cluster/): CPT and SFT past one node as a TrainJob, async RL on a
cluster as a RayJob. Its slice then carries what the job needs, and the stage's component, seeing
it, creates the job instead of training in place. The data step, where it must build the data on a
recipe with infra.rayjob, builds it in a RayJob too (`data_rayjob`).
"""

from __future__ import annotations

from typing import Any

from harnessrl.cluster.rayjob import cpu_only
from harnessrl.config import STAGES, Config, RayJobSlice, TrainJobSlice


def enabled_stages(cfg: Config) -> list[str]:
    """Stage names in chain order; `base` always runs."""
    return ["base"] + [s for s in STAGES[1:] if getattr(cfg.stages, s).enabled]


def training_nodes(cfg: Config, stage: str) -> int:
    """How many nodes CPT's or SFT's ranks span: 1 unless its world_size exceeds its pod's GPUs."""
    world, gpus = getattr(cfg.stages, stage).world_size, cfg.infra.for_stage(stage).accelerator_count
    return world // gpus if gpus and world > gpus else 1


def runs_as_rayjob(cfg: Config, stage: str) -> bool:
    """Whether an RL stage runs as a RayJob: enabled, async, on a recipe with infra.rayjob."""
    st = getattr(cfg.stages, stage)
    return cfg.infra.rayjob is not None and st.enabled and st.mode == "async"


def runs_as_job(cfg: Config, stage: str) -> bool:
    """Whether the stage's work runs in a Kubernetes job (TrainJob or RayJob) that its pod waits on."""
    if stage in ("cpt", "sft"):
        return training_nodes(cfg, stage) > 1
    return stage in ("rl", "long_horizon") and runs_as_rayjob(cfg, stage)


def data_rayjob(cfg: Config) -> RayJobSlice | None:
    """What the data step needs to build the data as a RayJob (components/data.py), on a recipe with
    infra.rayjob: its head and CPU-only worker groups, under the data step's timeout. None without."""
    infra = cfg.infra
    if infra.rayjob is None:
        return None
    return RayJobSlice(image=infra.image, pvc=infra.pvc, secrets=infra.secrets,
                       timeout_s=infra.for_stage("data").timeout_s, rayjob=cpu_only(infra.rayjob))  # fmt: skip


def stage_slice(cfg: Config, stage: str) -> dict[str, Any]:
    """Just what one stage reads. Passing only this to a task keeps the pipeline cache exact:
    changing one stage's config re-runs that stage (and, through its new output, those after it)."""
    common = {"name": cfg.name, "seed": cfg.seed, "model": cfg.model.model_dump()}
    if stage == "base":
        return common | {"data": cfg.data.model_dump()}
    out = common | {"stage": getattr(cfg.stages, stage).model_dump()}
    infra = cfg.infra
    if stage in ("cpt", "sft") and (nodes := training_nodes(cfg, stage)) > 1:
        # What the stage needs to create its TrainJob (harnessrl/cluster/trainjob.py).
        job = TrainJobSlice(image=infra.image, resources=infra.for_stage(stage), pvc=infra.pvc,
                            secrets=infra.secrets, trainjob=infra.trainjob, nodes=nodes)  # fmt: skip
        out |= {"cluster": job.model_dump()}
    if stage in ("rl", "long_horizon"):
        # Live RL's weights are not the stage's: changing them must not re-run it.
        out |= {"reward": cfg.reward.model_dump(exclude={"live"})}
        if getattr(cfg.stages, stage).mode == "async":  # how long its fleet waits for nodes to place it on
            out |= {"placement_timeout_s": infra.placement_timeout_s}
        if runs_as_rayjob(cfg, stage):
            # What the stage needs to create its RayJob (harnessrl/cluster/rayjob.py).
            job = RayJobSlice(image=infra.image, pvc=infra.pvc, secrets=infra.secrets,
                              timeout_s=infra.for_stage(stage).timeout_s, rayjob=infra.rayjob)  # fmt: skip
            out |= {"rayjob": job.model_dump()}
    if stage in ("rl", "long_horizon", "eval"):
        out |= {"engine": cfg.engine.model_dump()}
    return out
