"""Stage 6, real-time RL: one gated cycle over what `harnessrl serve` logged (harnessrl/live/cycle.py).

Unlike stages 1-5 it is not a link in the recipe's chain: it runs next to a live server, over the
live folder they share, as `harnessrl live run` locally or as a KFP recurring run on the cluster
(pipelines/live.py), every live.recurring_hours.
"""

from kfp.dsl import Dataset, Input


def work(config: str, live_dir: str, data_dir: str) -> dict:
    from harnessrl.config import Config
    from harnessrl.live.cycle import run_cycle
    from harnessrl.report.live import write_live_report

    row = run_cycle(Config.model_validate_json(config), live_dir, data_dir)
    if row["result"] != "waiting":
        write_live_report(live_dir)
    print(f"[live] cycle {row['cycle']}: {row['result']} ({row['sessions']} sessions)", flush=True)
    return row


def live_cycle(config: str, data: Input[Dataset], data_md5: str, code_hash: str, live_dir: str) -> str:
    """KFP component: one live cycle. Returns its result: waiting, alarm, promoted or rejected."""
    from components.live_rl import work

    return work(config, live_dir, data.path)["result"]
