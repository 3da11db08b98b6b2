"""Async RL rollouts on Ray: a local Ray session on one machine, a KubeRay cluster in production.

Three kinds of process:

- `RolloutWorker` (actor): a copy of the policy in a rollout engine, `hf` or `vllm`.
  `set_weights(version, blob)` loads the trainer's weights (a safetensors blob of its state dict) in
  place; `generate(requests, seed)` samples one batch. Every completion carries the version of the
  weights that produced it.
- `EnvWorker` (threaded actor): runs whole groups of sandboxed episodes in the harness. The episodes
  of a group run in lockstep (rollouts.run_group), so each turn of the whole group is one remote
  `generate` call; many groups run at once, each in its own actor thread.
- the trainer: the stage process itself (trainer.py), the Ray driver, or its rank group on Ray.

`RayRollouts` is the rollout source the RL loop takes (rollouts.RolloutSource, as LocalRollouts): it
dispatches a group as soon as it is submitted, hands groups back as they complete, and broadcasts the
trainer's weights after every step. An episode's version is the oldest weights any of its turns was
sampled with; the loop drops groups older than `max_staleness` and corrects the rest by importance
sampling.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import ray
import torch
from torch import nn

from harnessrl.config import Budgets, EngineConfig, RLConfig
from harnessrl.engines.hf import Completion
from harnessrl.engines.weights import weights_blob
from harnessrl.harness.episode import BASE_UID, Trajectory
from harnessrl.model.prompts import PromptRenderer
from harnessrl.rl import placement
from harnessrl.rl.rollouts import Rollout, run_group
from harnessrl.tasks.task import Task

UID_LIMIT = 65534  # `nobody`: the sandbox uids of concurrent episodes stay below it, one per episode
# Ray puts unix sockets under its temp dir (<dir>/session_<date>_<time>_<pid>/sockets/plasma_store, 65
# bytes past it), and a socket path may be at most 107 bytes: a deeper dir gets a short temp dir instead.
RAY_DIR_MAX = 40


# ----------------------------------------------------------------------------- actors


@ray.remote(concurrency_groups={"sample": 1, "weights": 1})
class RolloutWorker:
    """A copy of the policy in a rollout engine (`hf` or `vllm`, by `engine.kind`) that samples
    batches, one at a time. Weights come in on their own thread, so they reach the engine while a
    batch is in flight: `hf` takes them at the next token (the batch goes on under the new weights),
    `vllm` when the batch ends (its engine client is not thread-safe, so every call to it runs on
    the one thread that built it)."""

    def __init__(
        self, model_path: str, dtype: str, temperature: float, engine: EngineConfig, threads: int | None = None
    ) -> None:
        if threads:
            torch.set_num_threads(threads)
        if engine.kind == "vllm":
            from harnessrl.engines.vllm import VLLMEngine

            self._engine_thread: ThreadPoolExecutor | None = ThreadPoolExecutor(1, thread_name_prefix="vllm")
            self.engine = self._on_engine_thread(VLLMEngine, model_path, engine, dtype, temperature)
        else:
            from harnessrl.engines.hf import HFEngine
            from harnessrl.model.checkpoint import load

            self._engine_thread = None
            self.engine = HFEngine(*load(model_path, dtype), temperature)

    def _on_engine_thread(self, fn, *args):
        return fn(*args) if self._engine_thread is None else self._engine_thread.submit(fn, *args).result()

    @ray.method(concurrency_group="weights")
    def set_weights(self, version: int, blob: bytes) -> int:
        return self._on_engine_thread(self.engine.set_weights, version, blob)

    def node_id(self) -> str:
        """The Ray node this actor runs on: where placement put it."""
        return ray.get_runtime_context().get_node_id()

    def interrupts(self) -> int:
        """Batches its engine cut short for new weights, so far. In the default concurrency group:
        in "weights" the loop's per-step read would queue behind the sync it just sent."""
        return self.engine.interrupts

    @ray.method(concurrency_group="sample")
    def generate(self, requests: list[tuple[list[int], int]], seed: int) -> list[Completion]:
        """One completion per (prompt ids, room) request, at most `room` tokens, with the oldest
        version of the weights that sampled any of its tokens."""
        return self._on_engine_thread(self.engine.generate, requests, seed)


class Stopped(RuntimeError):
    """The fleet is closing: episodes in flight end at their next turn (their workspaces are removed)."""


@ray.remote
class EnvWorker:
    """Runs groups of episodes in the sandboxed harness; their turns go to the rollout workers."""

    def __init__(
        self,
        suite_dir: str,
        tok,
        context: int,
        cfg: RLConfig,
        budgets: Budgets,
        rollout_workers: list,
        uid_base: int,
        slots: int,
        tool_format: str = "hermes",
    ) -> None:
        from harnessrl.harness import formats

        self.suite_dir, self.cfg, self.budgets = Path(suite_dir), cfg, budgets
        # prompts, stop ids and the tool-call format, exactly as the trainer's
        self.renderer = PromptRenderer(tok, context, formats.load(tool_format))
        self.rollout_workers = rollout_workers
        self._free = list(range(uid_base, uid_base + slots))  # sandbox uids, one per live episode
        self._lock = threading.Lock()
        self._groups = 0
        self._stopping = threading.Event()

    def run_group(self, task_json: dict[str, Any], group_size: int, seed: int) -> list[dict[str, Any]]:
        """`group_size` episodes of the task, concurrently: [{"trajectory": json, "version": int}]."""
        task = Task.model_validate(task_json)
        with self._lock:
            uids, self._free = self._free[:group_size], self._free[group_size:]
            worker = self.rollout_workers[self._groups % len(self.rollout_workers)]  # one worker serves a group
            self._groups += 1
        if len(uids) < group_size:
            raise RuntimeError("EnvWorker: more concurrent episodes than sandbox uids (raise its slots)")

        def remote_generate(requests: list[tuple[list[int], int]], s: int) -> list[Completion]:
            if self._stopping.is_set():
                raise Stopped("the rollout fleet is closing")
            return ray.get(worker.generate.remote(requests, s))

        try:
            trajs, versions = run_group(
                [task] * group_size, self.suite_dir, self.budgets, self.renderer, remote_generate, seed, uids
            )
        finally:
            with self._lock:
                self._free += uids
        oldest = min(versions.values(), default=0)  # an episode with no sampled turn: the group's oldest
        return [
            {"trajectory": tr.model_dump(mode="json"), "version": versions.get(i, oldest)} for i, tr in enumerate(trajs)
        ]

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def stop(self) -> None:
        self._stopping.set()


# ----------------------------------------------------------------------------- the rollout source


def start_ray(ray_dir: Path | str, num_cpus: int | None = None, **init_kwargs) -> bool:
    """Join the Ray cluster at RAY_ADDRESS (KubeRay), else start a local one with its files under
    `ray_dir` (not ~/.ray or /tmp/ray). Returns whether this call started Ray (so should stop it)."""
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, **init_kwargs}
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], **kwargs)
        return True
    ray_dir = Path(ray_dir).resolve()
    if len(str(ray_dir)) > RAY_DIR_MAX:
        ray_dir = Path(tempfile.mkdtemp(prefix="hrl-ray-"))
        atexit.register(shutil.rmtree, ray_dir, ignore_errors=True)
    ray_dir.mkdir(parents=True, exist_ok=True)
    ray.init(num_cpus=num_cpus or len(os.sched_getaffinity(0)), _temp_dir=str(ray_dir), **kwargs)
    return True


def actor_options(resources: dict[str, float]) -> dict[str, Any]:
    """Ray actor options for a placement (config.Placement): Ray's own CPU and GPU go by name, custom
    resources (a KubeRay worker group's) under `resources`."""
    options: dict[str, Any] = {}
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}
    if "CPU" in resources:
        options["num_cpus"] = resources["CPU"]
    if "GPU" in resources:
        options["num_gpus"] = resources["GPU"]
    if custom:
        options["resources"] = custom
    return options


class RayRollouts:
    """The async rollout source: `cfg.rollout_workers` RolloutWorkers, `cfg.env_workers` EnvWorkers."""

    def __init__(
        self,
        model_path: Path | str,
        tok,
        suite_dir: Path | str,
        cfg: RLConfig,
        budgets: Budgets,
        ray_dir: Path | str,
        engine: EngineConfig,
        dtype: str = "float32",
        threads: int | None = 1,
        rollout_options: dict[str, Any] | None = None,
        env_options: dict[str, Any] | None = None,
        tag: str = "rl",
        placement_timeout_s: float = 600.0,
        tool_format: str = "hermes",
    ) -> None:
        from transformers import AutoConfig

        self.cfg = cfg
        self._started = start_ray(ray_dir)
        # Every group must fit before any actor is created: an actor Ray cannot place waits forever.
        # A cluster we joined may still be bringing up nodes; a local session never grows.
        try:
            placement.check(tag, placement.groups_of(cfg), placement.ray_nodes,
                            can_grow=bool(os.environ.get("RAY_ADDRESS")), timeout_s=placement_timeout_s)  # fmt: skip
        except BaseException:
            if self._started:
                ray.shutdown()
            raise
        context = AutoConfig.from_pretrained(model_path, local_files_only=True).max_position_embeddings
        # The loop keeps prompts_per_step * (1 + max_staleness) groups in flight, overshooting by less
        # than one step's worth; every EnvWorker thread runs one group, plus one for control calls.
        groups = cfg.prompts_per_step * (2 + cfg.max_staleness)
        per_worker = -(-groups // cfg.env_workers)
        slots = per_worker * cfg.group_size
        if BASE_UID + cfg.env_workers * slots > UID_LIMIT:
            raise ValueError(
                f"stages.rl.env_workers: {cfg.env_workers} workers x {slots} concurrent episodes need more "
                f"sandbox uids than {BASE_UID}..{UID_LIMIT} holds"
            )
        rollout_options = actor_options(cfg.placement.rollout) | (rollout_options or {})
        env_options = actor_options(cfg.placement.env) | (env_options or {})
        self.rollout_workers = [
            RolloutWorker.options(**rollout_options).remote(str(model_path), dtype, cfg.temperature, engine, threads)
            for _ in range(cfg.rollout_workers)
        ]
        self.env_workers = [
            EnvWorker.options(max_concurrency=per_worker + 1, **env_options).remote(
                str(suite_dir),
                tok,
                context,
                cfg,
                budgets,
                self.rollout_workers,
                BASE_UID + w * slots,
                slots,
                tool_format,
            )
            for w in range(cfg.env_workers)
        ]
        self._busy = [0] * cfg.env_workers
        self._pending: dict[Any, tuple[Task, int]] = {}  # ObjectRef of a group -> (task, env worker)
        self._syncs: list = []
        self._submitted = 0
        self._closed = False

    def submit(self, task: Task, seed: int) -> None:
        w = min(range(len(self.env_workers)), key=self._busy.__getitem__)
        ref = self.env_workers[w].run_group.remote(task.model_dump(mode="json"), self.cfg.group_size, seed)
        self._pending[ref] = (task, w)
        self._busy[w] += 1
        self._submitted += 1

    def ready(self, n: int) -> list[list[Rollout]]:
        """`n` completed groups (blocking until there are), in the order they finished."""
        if not 0 < n <= len(self._pending):
            raise ValueError(f"ready({n}) with {len(self._pending)} groups in flight")
        done, _ = ray.wait(list(self._pending), num_returns=n)
        groups = []
        for ref in done:
            task, w = self._pending.pop(ref)
            self._busy[w] -= 1
            rows = ray.get(ref)
            groups.append([Rollout(task, Trajectory.model_validate(r["trajectory"]), r["version"]) for r in rows])
        return sorted(groups, key=lambda g: max(r.trajectory.started_at + r.trajectory.wall_s for r in g))

    def publish(self, version: int, model: nn.Module) -> None:
        """Send the trainer's weights to every RolloutWorker: serialised once, one object for all.
        It does not wait for them to land (the versions tell the loop which weights made what), except
        the first time and with max_staleness 0, where a late sync would only waste rollouts."""
        if self._syncs:
            ray.get(self._syncs)  # the previous sync landed (and raises here if it failed)
        blob = ray.put(weights_blob(model))
        self._syncs = [w.set_weights.remote(version, blob) for w in self.rollout_workers]
        if self._submitted == 0 or self.cfg.max_staleness == 0:
            ray.get(self._syncs)

    def interrupts(self) -> int:
        """Batches the rollout engines cut short for new weights, so far."""
        return sum(ray.get([w.interrupts.remote() for w in self.rollout_workers]))

    def close(self, wait_s: float = 30.0) -> None:
        """Stop the fleet: episodes in flight end at their next turn, then the actors go (and Ray,
        if this started it)."""
        if self._closed:
            return
        self._closed = True
        try:
            ray.get([w.stop.remote() for w in self.env_workers], timeout=wait_s)
            if self._pending:  # let them remove their workspaces; they end in Stopped, which is expected
                ended, running = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=wait_s)
                for ref in ended:
                    with contextlib.suppress(Exception):
                        ray.get(ref)  # taken, so Ray does not report it as an unhandled error
                if running:
                    print(f"[fleet] {len(running)} group(s) still running after {wait_s:.0f} s: killed", flush=True)
        except Exception as e:  # a dead worker: nothing left to stop; don't hide the error that closed us
            print(f"[fleet] closing: {type(e).__name__}: {e}", flush=True)
        finally:
            self._pending.clear()
            for a in self.env_workers + self.rollout_workers:
                ray.kill(a)
            if self._started:
                ray.shutdown()
