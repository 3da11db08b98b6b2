"""Run a training job on this machine: on 1 process in-process, or on N processes through torchrun.

A job is `module:function(ctx, rank, world) -> metrics` (harnessrl/train/spec.py), the same function
on one process, on N, and on every node of a job that runs `python -m harnessrl.train.launch SPEC`
under torchrun, so the paths cannot drift apart. Rank 0's metrics come back. Where a stage trains is
the stage's choice (components/cpt.py, components/sft.py), not this module's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harnessrl.stage import StageContext
from harnessrl.train import distributed
from harnessrl.train.spec import read_spec, resolve, write_spec


def launch(target: str, ctx: StageContext, world_size: int) -> dict:
    if world_size == 1:
        rank, world = distributed.setup()
        return resolve(target)(ctx, rank, world)

    spec, result = write_spec(target, ctx)
    # One thread per rank: ranks already fill the cores, and oversubscription slows every rank.
    env = os.environ | {"OMP_NUM_THREADS": "1", "HARNESSRL_THREADS": "1"}
    proc = subprocess.run(torchrun_command(spec, world_size), env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{target} on {world_size} processes failed (exit {proc.returncode})")
    metrics = json.loads(result.read_text())
    spec.unlink()
    result.unlink()
    return metrics


def torchrun_command(
    spec: Path, nproc_per_node: int, nnodes: int = 1, rdzv_endpoint: str = "", rdzv_id: str = "harnessrl"
) -> list[str]:
    """torchrun running the job's ranks on this node: alone (`--standalone`), or as one of `nnodes`
    nodes that meet at a c10d rendezvous on `rdzv_endpoint` (host:port), as each node of a TrainJob does."""
    if nnodes == 1:
        where = ["--standalone"]
    else:
        where = [
            f"--nnodes={nnodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv_endpoint}",
            f"--rdzv-id={rdzv_id}",
        ]
    return [sys.executable, "-m", "torch.distributed.run", *where, f"--nproc-per-node={nproc_per_node}",
            "-m", "harnessrl.train.launch", str(spec)]  # fmt: skip


def _worker(spec_path: str) -> None:
    import torch

    target, ctx, result = read_spec(spec_path)
    torch.set_num_threads(1)
    rank, world = distributed.setup()
    metrics = resolve(target)(ctx, rank, world)
    if rank == 0:
        result.write_text(json.dumps(metrics))
    distributed.finish(exit_process=True)


if __name__ == "__main__":
    _worker(sys.argv[1])
