"""The whole recipe: every part, and the checks that need more than one of them."""

from __future__ import annotations

from pydantic import Field, model_validator

from harnessrl.config.base import Strict
from harnessrl.config.infra import InfraConfig, StoreConfig
from harnessrl.config.models import DataConfig, EngineConfig, LiveConfig, ModelConfig, RewardConfig
from harnessrl.config.stages import StagesConfig


class Config(Strict):
    name: str = Field(description="recipe name")
    seed: int = 0
    model: ModelConfig
    data: DataConfig
    stages: StagesConfig
    reward: RewardConfig
    engine: EngineConfig
    live: LiveConfig = Field(default_factory=LiveConfig, description="real-time RL: `harnessrl live`")
    infra: InfraConfig
    store: StoreConfig = Field(default_factory=StoreConfig, description="not part of any stage's cache key")

    @model_validator(mode="after")
    def _long_horizon_compared(self) -> Config:
        if self.stages.eval.long_horizon_tasks and not self.stages.long_horizon.enabled:
            raise ValueError(
                "stages.eval.long_horizon_tasks: the comparison needs the long-horizon stage "
                "(stages.long_horizon.enabled is false); set it to 0"
            )
        return self

    @model_validator(mode="after")
    def _training_nodes_are_whole(self) -> Config:
        # Training past one pod's GPUs runs as a TrainJob of whole nodes on the shared PVC; a recipe
        # that asks for it without either, or for a fraction of a node, would never start: refused.
        for stage in ("cpt", "sft"):
            world, gpus = getattr(self.stages, stage).world_size, self.infra.for_stage(stage).accelerator_count
            if not gpus or world <= gpus:
                continue
            where = f"stages.{stage}.world_size: {world} ranks on infra.resources.{stage}'s {gpus} GPUs per node"
            if world % gpus:
                raise ValueError(f"{where} is not a whole number of nodes")
            if self.infra.trainjob is None or self.infra.pvc is None:
                raise ValueError(f"{where} needs a TrainJob: set infra.trainjob and infra.pvc (the shared folder)")
        return self

    @model_validator(mode="after")
    def _rayjob_places_every_actor(self) -> Config:
        # A RayJob runs the async RL stages; a placement that no worker group advertises would leave
        # its actors pending forever, and a RayJob config with no async stage would do nothing.
        if self.infra.rayjob is None:
            return self
        if self.infra.pvc is None:
            raise ValueError("infra.rayjob needs infra.pvc: the shared folder its pods and the stage exchange files in")
        # pipelines/routing.py's runs_as_rayjob, restated: the config cannot import the pipeline.
        async_stages = [s for s in ("rl", "long_horizon") if getattr(self.stages, s).enabled
                        and getattr(self.stages, s).mode == "async"]  # fmt: skip
        if not async_stages:
            raise ValueError("infra.rayjob: no enabled RL stage runs in mode async, so no RayJob would be created; "
                             "set infra.rayjob=null or mode: async")  # fmt: skip
        offered: dict[str, float] = {}
        for g in self.infra.rayjob.workers.values():
            for r, amount in g.resources.items():
                offered[r] = offered.get(r, 0) + amount * g.replicas
        for stage in async_stages:
            st = getattr(self.stages, stage)
            actors = {"rollout": st.rollout_workers, "env": st.env_workers, "trainer": st.trainer_world_size}
            for kind, wanted in st.placement.model_dump().items():
                missing = sorted(set(wanted) - {"CPU", "GPU"} - set(offered))
                if missing:
                    raise ValueError(f"stages.{stage}.placement.{kind}: no infra.rayjob worker group advertises "
                                     f"{missing} (they offer {sorted(offered)})")  # fmt: skip
                # Actors that do not fit stay pending until the deadline: refuse them now.
                for r, amount in wanted.items():
                    if r in offered and actors[kind] * amount > offered[r]:
                        raise ValueError(f"stages.{stage}.placement.{kind}: {actors[kind]} actors x {amount} {r} "
                                         f"need more than the {offered[r]:g} infra.rayjob's groups offer")  # fmt: skip
        return self
