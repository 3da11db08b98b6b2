"""The stage contract, shared by every component.

A stage takes its config slice, the previous stage's checkpoint and the data folder, and writes one
output folder: the checkpoint (HF format where it is a model), `metrics.jsonl`, and `manifest.json`
written last. The folder appears only when complete (atomic rename), so a killed stage never leaves
a half-written checkpoint that a later stage, or a cache, could take for done.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harnessrl.config import config_hash
from harnessrl.io import atomic_dir
from harnessrl.lineage.manifest import write_manifest


@dataclass(frozen=True)
class StageContext:
    cfg: dict  # the stage's config slice (pipelines/routing.py: stage_slice)
    parent: Path | None  # previous stage's checkpoint; None for `base`
    out: Path  # where to write; renamed into place when the stage returns
    data_dir: Path | None  # None only in the data step's own RayJob, which builds it
    state_dir: Path | None = None  # resumable training state; survives a killed stage


# The one number per stage that the run summary shows.
KEY_METRIC = {
    "base": "params",
    "cpt": "loss",
    "sft": "loss",
    "rl": "reward",
    "long_horizon": "reward",
    "eval": "success",
}


def _state_dir(stage: str, cfg: dict, parent: str | None, out: str) -> Path:
    """Where a stage keeps its resumable state. `harnessrl run` points HARNESSRL_STATE_ROOT into the run
    directory, so a resumed run (which kfp gives new output paths) finds the state of the killed one;
    the key holds the config and parent, so a changed stage never resumes from a stale state."""
    root = os.environ.get("HARNESSRL_STATE_ROOT")
    if not root:
        return Path(out).with_name(Path(out).name + ".state")
    return Path(root) / stage / config_hash({"config": cfg, "parent": parent})[:16]


def run_stage(
    stage: str,
    work: Callable[[StageContext], dict],
    config_json: str,
    data_dir: str,
    data_md5: str,
    parent: str | None,
    out: str,
) -> float:
    """Run one stage's `work` into a temp folder, write its manifest, move it into place."""
    import torch  # here, not at import: the DAG builder imports this module and must stay light

    cfg = json.loads(config_json)
    torch.manual_seed(cfg["seed"])
    torch.set_num_threads(max(1, int(os.environ.get("HARNESSRL_THREADS", os.cpu_count() or 1))))
    started = time.time()
    print(f"[{stage}] start: parent={parent or '-'} data={data_dir}", flush=True)
    state_dir = _state_dir(stage, cfg, parent, out)
    with atomic_dir(out) as tmp:
        ctx = StageContext(
            cfg=cfg,
            parent=Path(parent) if parent else None,
            out=tmp,
            data_dir=Path(data_dir),
            state_dir=state_dir,
        )
        metrics = work(ctx)
        metrics["seconds"] = round(time.time() - started, 2)
        write_manifest(
            tmp,
            stage=stage,
            config=cfg,
            parent=ctx.parent,
            data_md5=data_md5,
            data_dir=ctx.data_dir,
            metrics=metrics,
            started=started,
            seed=cfg["seed"],
        )
    shutil.rmtree(state_dir, ignore_errors=True)  # the checkpoint is complete: its resume state is spent
    print(f"[{stage}] done in {time.time() - started:.1f}s: {json.dumps(metrics)}", flush=True)
    return float(metrics[KEY_METRIC[stage]])
