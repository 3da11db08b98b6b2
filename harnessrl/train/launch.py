"""Run a training job on 1 process in-process, or on N processes through torchrun.

A job is `module:function(ctx, rank, world) -> metrics`, the same function either way, so the
single-process path and the multi-process path cannot drift apart. Rank 0's metrics come back.
On a cluster, multi-node jobs run the same entry point under Kubeflow Trainer.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from harnessrl.stage import StageContext
from harnessrl.train import distributed


def _resolve(target: str) -> Callable[[StageContext, int, int], dict]:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def launch(target: str, ctx: StageContext, world_size: int) -> dict:
    if world_size == 1:
        rank, world = distributed.setup()
        return _resolve(target)(ctx, rank, world)

    spec = ctx.out / ".launch.json"
    result = ctx.out / ".launch-result.json"
    fields = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(ctx).items()}
    spec.write_text(json.dumps({"target": target, "ctx": fields, "result": str(result)}))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={world_size}",
        "-m",
        "harnessrl.train.launch",
        str(spec),
    ]
    # One thread per rank: ranks already fill the cores, and oversubscription slows every rank.
    env = os.environ | {"OMP_NUM_THREADS": "1", "HARNESSRL_THREADS": "1"}
    proc = subprocess.run(cmd, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{target} on {world_size} processes failed (exit {proc.returncode})")
    metrics = json.loads(result.read_text())
    spec.unlink()
    result.unlink()
    return metrics


def _worker(spec_path: str) -> None:
    import torch

    spec = json.loads(Path(spec_path).read_text())
    ctx = StageContext(**{k: (v if k == "cfg" or v is None else Path(v)) for k, v in spec["ctx"].items()})
    torch.set_num_threads(1)
    rank, world = distributed.setup()
    metrics = _resolve(spec["target"])(ctx, rank, world)
    if rank == 0:
        Path(spec["result"]).write_text(json.dumps(metrics))
    distributed.finish(exit_process=True)


if __name__ == "__main__":
    _worker(sys.argv[1])
