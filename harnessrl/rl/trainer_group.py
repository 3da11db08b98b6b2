"""The RL trainer on `trainer_world_size` DeepSpeed ranks: a Ray actor group.

Each `TrainerRank` holds a copy of the policy in a DeepSpeed engine; together they are one
data-parallel torch.distributed group (gloo on CPU, NCCL on GPU), which rank 0's address starts.
Every step, each rank takes its share of every mini-batch (loop.update with its rank), the engines
average the gradients, and all step alike. Rank 0's weights then come back to the driver's copy of
the model, which the rollout engines and the final checkpoint read, as the single-process trainer's
model would be.

On KubeRay the ranks land on the trainer worker group by RL's `placement.trainer` (e.g.
`{trainer: 1, GPU: 1}`: one GPU each, which Ray makes the rank's only visible device).
"""

from __future__ import annotations

from pathlib import Path

import ray
from torch import nn

from harnessrl.config import RLConfig
from harnessrl.engines.weights import load_weights
from harnessrl.rl.fleet import actor_options
from harnessrl.rl.loop import Update
from harnessrl.rl.objective import Sample


@ray.remote
class TrainerRank:
    """Rank `rank` of the trainer group. Its methods import what they use: Ray ships the class by
    value, and module globals such as torch's config would not pickle."""

    def __init__(self, rank: int, world: int, model, reference, cfg, pad: int, seed: int, threads: int) -> None:
        import torch

        self.rank, self.world, self.cfg, self.pad, self.seed = rank, world, cfg, pad, seed
        self.model, self.reference = model, reference
        torch.set_num_threads(threads)

    def address(self) -> tuple[str, int]:
        """Where rank 0 listens for the group's rendezvous."""
        from harnessrl.train.distributed import free_port

        return ray.util.get_node_ip_address(), free_port()

    def setup(self, addr: str, port: int) -> None:
        """Join the process group and build this rank's trainer; every rank calls this at once."""
        import os

        import torch

        from harnessrl.rl.loop import LocalTrainer

        os.environ.update(RANK=str(self.rank), WORLD_SIZE=str(self.world), LOCAL_RANK="0",
                          MASTER_ADDR=addr, MASTER_PORT=str(port))  # fmt: skip
        torch.manual_seed(self.seed)
        if torch.cuda.is_available():  # Ray made this rank's GPU its only visible one
            self.model.cuda()
            if self.reference is not None:
                self.reference.cuda()
        self.trainer = LocalTrainer(self.model, self.reference, self.cfg, self.pad, self.rank, self.world)

    def update(self, samples: list) -> object:
        return self.trainer.update(samples)

    def weights(self) -> bytes:
        from harnessrl.engines.weights import weights_blob

        return weights_blob(self.model)

    def save(self, state_dir: str, step: int, extra: dict) -> None:
        from pathlib import Path

        self.trainer.save(Path(state_dir), step, extra)

    def load(self, state_dir: str) -> tuple[int, dict]:
        from pathlib import Path

        return self.trainer.load(Path(state_dir))


class TrainerGroup:
    """The trainer as `cfg.trainer_world_size` ranks; the same methods as loop.LocalTrainer."""

    def __init__(self, model: nn.Module, reference: nn.Module | None, cfg: RLConfig, pad: int, seed: int,
                 threads: int = 1) -> None:  # fmt: skip
        if not ray.is_initialized():
            raise RuntimeError("stages.*.trainer_world_size > 1 needs Ray: the async fleet starts it")
        self.model, world = model, cfg.trainer_world_size
        options = actor_options(cfg.placement.trainer)
        shared = ray.put(model), ray.put(reference)  # one copy in the object store for every rank
        self.ranks = [
            TrainerRank.options(**options).remote(r, world, shared[0], shared[1], cfg, pad, seed, threads)
            for r in range(world)
        ]
        try:
            addr, port = ray.get(self.ranks[0].address.remote())
            ray.get([rank.setup.remote(addr, port) for rank in self.ranks])
        except BaseException:
            self.close()
            raise

    def update(self, samples: list[Sample]) -> Update:
        parts = ray.get([rank.update.remote(samples) for rank in self.ranks])
        load_weights(self.model, ray.get(self.ranks[0].weights.remote()))
        return Update.combine(parts)

    def save(self, state_dir: Path, step: int, extra: dict) -> None:
        ray.get([rank.save.remote(str(state_dir), step, extra) for rank in self.ranks])  # a collective save

    def load(self, state_dir: Path) -> tuple[int, dict]:
        loaded = ray.get([rank.load.remote(str(state_dir)) for rank in self.ranks])
        if loaded[0][0]:
            load_weights(self.model, ray.get(self.ranks[0].weights.remote()))
        return loaded[0]

    def close(self) -> None:
        for rank in self.ranks:
            ray.kill(rank)
