"""Can the async fleet's actors be placed? Asked before any actor is created, so that a placement no
node offers fails at once, naming the resource and the group, instead of leaving actors pending.

A placement (config.Placement) asks, per actor of a group, for Ray resources: GPU, CPU, or a custom
resource that a KubeRay worker group advertises (`rollout`, `env`, `trainer`). A local Ray session
offers this machine's CPUs and GPUs and no custom resource at all, and it never grows. A cluster may:
its autoscaler adds nodes, and a RayJob's worker pods start after its head. There the check waits,
with a progress line, up to `infra.placement_timeout_s`, and then fails naming what was missing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from harnessrl.config import Config, ConfigError, RLConfig

# Ray's own resources, which every node has some of; anything else is a custom resource.
NODE_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")
CLEAR = "clear it with stages.{stage}.placement=none (or stages.{stage}.placement.{group}=none)"


class PlacementError(ValueError):
    """A placement that the Ray cluster cannot satisfy; the message names the group and resource."""


def shortfall(groups: dict[str, tuple[int, dict[str, float]]], nodes: list[dict[str, float]]) -> tuple[str, str] | None:
    """The first group that cannot be placed on `nodes` (each node's total resources), and why; None
    when all fit. `groups` is {group: (actors, resources per actor)}. Each group is checked on its own:
    its actors must fit whole on the nodes, an actor never split across two."""
    for group, (count, wanted) in groups.items():
        asked = {r: v for r, v in wanted.items() if v > 0}
        if not asked or count == 0:
            continue
        fits = [min(int(n.get(r, 0) // v) for r, v in asked.items()) for n in nodes]
        if sum(fits) >= count:
            continue
        missing = sorted(r for r, v in asked.items() if not any(n.get(r, 0) >= v for n in nodes))
        if missing:
            have = sorted({r for n in nodes for r in n if r not in NODE_RESOURCES and not r.startswith("node:")})
            return group, (f"asks for {', '.join(f'{asked[r]:g} {r}' for r in missing)} per actor, which no "
                           f"node offers (custom resources offered: {', '.join(have) or 'none'})")  # fmt: skip
        return group, f"{count} actors of {asked} each need more than the nodes offer (room for {sum(fits)})"
    return None


def groups_of(st: RLConfig) -> dict[str, tuple[int, dict[str, float]]]:
    """An RL stage's actor groups: how many actors each has, and what each actor asks for."""
    ranks = st.trainer_world_size if st.trainer_world_size > 1 else 0  # one rank trains in the driver
    return {
        "rollout": (st.rollout_workers, st.placement.rollout),
        "env": (st.env_workers, st.placement.env),
        "trainer": (ranks, st.placement.trainer),
    }


def preflight(cfg: Config) -> None:
    """Before a local run starts anything: an async RL stage whose placement this machine's Ray can
    never offer is a bad recipe (ConfigError: exit 2). A run that joins a cluster (RAY_ADDRESS) or
    runs as a RayJob is judged there, by `check`, when the cluster is up."""
    if cfg.infra.rayjob is not None or os.environ.get("RAY_ADDRESS"):
        return
    for stage in ("rl", "long_horizon"):
        st = getattr(cfg.stages, stage)
        if not st.enabled or st.mode != "async" or not any(st.placement.model_dump().values()):
            continue
        if (problem := shortfall(groups_of(st), local_nodes())) is not None:
            group, why = problem
            raise ConfigError(f"stages.{stage}.placement.{group} {why} on this machine's Ray; "
                              + CLEAR.format(stage=stage, group=group))  # fmt: skip


def local_nodes() -> list[dict[str, float]]:
    """What a local Ray session started here offers: this machine's CPUs and GPUs, one node."""
    import torch

    return [{"CPU": float(len(os.sched_getaffinity(0))), "GPU": float(torch.cuda.device_count())}]


def ray_nodes() -> list[dict[str, float]]:
    """The running Ray cluster's live nodes and their total resources."""
    import ray

    return [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]


def check(
    stage: str,
    groups: dict[str, tuple[int, dict[str, float]]],
    nodes: Callable[[], list[dict[str, float]]],
    can_grow: bool,
    timeout_s: float,
    poll_s: float = 5.0,
) -> None:
    """Raise PlacementError unless `groups` fit on `nodes()`. A cluster that `can_grow` is asked again
    every `poll_s` until `timeout_s`; one that cannot is judged at once."""
    deadline = time.monotonic() + timeout_s
    while (problem := shortfall(groups, nodes())) is not None:
        group, why = problem
        left = deadline - time.monotonic()
        if not can_grow or left <= 0:
            waited = f" after waiting {timeout_s:g} s (infra.placement_timeout_s)" if can_grow else ""
            raise PlacementError(
                f"stages.{stage}.placement.{group} {why}{waited}; {CLEAR.format(stage=stage, group=group)}"
            )
        print(f"[{stage}] waiting for nodes: placement.{group} {why} ({left:.0f} s left)", flush=True)
        time.sleep(min(poll_s, left))
