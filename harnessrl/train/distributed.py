"""torch.distributed set-up for DeepSpeed: gloo on CPU, nccl on GPU, one process or many.

The CPU pitfalls from the machine notes are handled here, once, so no caller meets them:
- a lone `python` process would make DeepSpeed look for MPI: we fill in the torchrun variables;
- DeepSpeed compiles a shared-memory C++ op on every first CPU start (30-50 s): gloo doesn't need it;
- 2-process runs can abort at interpreter exit: `finish()` ends each rank cleanly.
"""

from __future__ import annotations

import importlib
import os
import sys

import torch

from harnessrl.serve.process import free_port


def setup() -> tuple[int, int]:
    """Initialise the process group (idempotent); returns (rank, world_size)."""
    import deepspeed

    if not torch.distributed.is_initialized():
        single = "MASTER_PORT" not in os.environ  # a plain process, not started by torchrun or a launcher
        if single:
            os.environ.update(
                RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())
            )
        on_gpu = torch.cuda.is_available()
        if not on_gpu:
            importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
        deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo", verbose=False)
        if single:
            # The rendezvous is done. Child processes must not inherit this port: a stage started
            # from here would try to listen on it again.
            del os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def finish(exit_process: bool = False) -> None:
    """Barrier, tear the group down, and (in launched workers) exit without interpreter teardown."""
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    if exit_process:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
