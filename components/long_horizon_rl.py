"""Stage 4, long-horizon RL with self-summarization.

The RL stage's own loop, on the long-horizon suite, under a context policy: when an episode's context
reaches `context.trigger` tokens the policy writes a summary (capped at `context.summary_max_tokens`) and goes
on from it (harnessrl/harness/context.py). Every segment's turns, the summaries among them, are
trained with the trajectory's one advantage, so the final outcome is what teaches a summary what to
keep; episodes that run out of a budget get no gradient with `overlong_mask` (harnessrl/rl/loop.py).
The checkpoint's harness.json records the context policy, which `harnessrl agent` and the eval's
long-horizon comparison run it under.
"""

from kfp.dsl import Dataset, Input, Model, Output

from components import rl
from harnessrl.config import LongHorizonConfig
from harnessrl.stage import StageContext


def work(ctx: StageContext) -> dict:
    return rl.work(ctx, LongHorizonConfig, tag="long_horizon")


def long_horizon(
    config: str, data: Input[Dataset], data_md5: str, code_hash: str, parent: Input[Model], checkpoint: Output[Model]
) -> float:
    """KFP component: long-horizon RL."""
    from components.long_horizon_rl import work
    from harnessrl.stage import run_stage

    return run_stage("long_horizon", work, config, data.path, data_md5, parent.path, checkpoint.path)
