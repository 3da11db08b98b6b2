"""Run a training job on 1 process in-process, on N processes through torchrun, or across nodes.

A job is `module:function(ctx, rank, world) -> metrics`, the same function in all three places, so
the paths cannot drift apart. Rank 0's metrics come back. A stage whose config slice has a `cluster`
part (its world_size spans several nodes) runs as a Kubeflow Trainer TrainJob
(harnessrl/cluster/trainjob.py), whose pods run torchrun on this module's `_worker`.
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


def resolve(target: str) -> Callable[..., dict]:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def launch(target: str, ctx: StageContext, world_size: int) -> dict:
    if "cluster" in ctx.cfg:
        from harnessrl.cluster import trainjob

        return trainjob.run(target, ctx, world_size)
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


def write_spec(target: str, ctx: StageContext) -> tuple[Path, Path]:
    """The job's description for its ranks, in the output folder every rank sees: (spec, result).
    Across nodes that folder is shared storage (the pipeline root's PVC)."""
    spec = ctx.out / ".launch.json"
    result = ctx.out / ".launch-result.json"
    fields = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(ctx).items()}
    spec.write_text(json.dumps({"target": target, "ctx": fields, "result": str(result)}))
    return spec, result


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


def read_spec(spec_path: str | Path) -> tuple[str, StageContext, Path]:
    """What `write_spec` wrote: (target, ctx, result path)."""
    spec = json.loads(Path(spec_path).read_text())
    ctx = StageContext(**{k: (v if k == "cfg" or v is None else Path(v)) for k, v in spec["ctx"].items()})
    return spec["target"], ctx, Path(spec["result"])


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
