"""Stage 4, long-horizon RL with self-summarization.

Until its own issue lands, it runs the RL stage's loop under its own config (a further, smaller
policy-gradient phase); the summarization trigger and the long-horizon suite plug in here.
"""

from kfp.dsl import Input, Model, Output

from components import rl
from harnessrl.config import LongHorizonConfig
from harnessrl.stage import StageContext


def work(ctx: StageContext) -> dict:
    return rl.work(ctx, LongHorizonConfig, tag="long_horizon")


def long_horizon(
    config: str, data_dir: str, data_md5: str, code_hash: str, parent: Input[Model], checkpoint: Output[Model]
) -> float:
    """KFP component: long-horizon RL."""
    from components.long_horizon_rl import work
    from harnessrl.stage import run_stage

    return run_stage("long_horizon", work, config, data_dir, data_md5, parent.path, checkpoint.path)
