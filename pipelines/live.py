"""Real-time RL's pipeline: the data step, then one live cycle over a live folder shared with
`harnessrl serve` (on the cluster: a folder on infra.pvc). Compiled once, it runs as a KFP recurring
run every live.recurring_hours, uncached: each run is a new cycle over new sessions. (No `from __future__ import annotations`: kfp
reads the pipeline's parameter types from its annotations.)"""

from collections.abc import Callable

from kfp import dsl

from components.data import data
from components.live_rl import live_cycle
from harnessrl.config import Config
from pipelines.dag import DataSource, data_step, pipeline_name, schedule


def build_live_pipeline(cfg: Config, source: DataSource, code_hash: str, live_dir: str) -> Callable:
    data_op = dsl.component(data, base_image=cfg.infra.image, install_kfp_package=False)
    cycle_op = dsl.component(live_cycle, base_image=cfg.infra.image, install_kfp_package=False)

    def pipeline(live_dir: str = live_dir) -> str:
        data_task = data_step(data_op, cfg, source, code_hash)
        task = cycle_op(config=cfg.model_dump_json(), data=data_task.outputs["dataset"],
                        data_md5=data_task.outputs["Output"], code_hash=code_hash, live_dir=live_dir)  # fmt: skip
        task.set_display_name("live").set_caching_options(False)  # every run is a new cycle
        schedule(task, cfg.infra.for_stage("live"), cfg.infra)
        return task.output

    return dsl.pipeline(pipeline, name=pipeline_name(cfg) + "-live", description=f"harnessrl live RL ({cfg.name})",
                        pipeline_root=cfg.infra.pipeline_root)  # fmt: skip
