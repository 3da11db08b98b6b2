"""RL performance claims, side by side:

(a) async rollouts on Ray against sync, under a long-tailed environment latency. Both runs train the
    same number of trajectories (steps x prompts_per_step x group_size) of the tiny smoke model; every
    turn's environment response (tools, checks) takes an extra lognormal sleep, injected here only, by
    wrapping the policy each episode runs with (in this process for sync, in the Ray workers through a
    process setup hook for async). Sync waits, every turn, for the slowest of a step's episodes and
    generates nothing while it trains; async keeps 1 + max_staleness steps of groups in flight, so a
    slow episode holds back only its own group and generation overlaps the update.

(d) weight-sync latency: the trainer's weights into a running Ray rollout worker, against a sync
    through a checkpoint file.

(b) and (c) are their own scripts: bench/rl_vs_trl.py and bench/rollout_throughput.py.

    PYTHONPATH=. python bench/rl.py [--only a|d] [--steps 24] [--staleness 2] [--prompts 4] [--group 4]

About 3-4 minutes on 2 cores (building the tiny base included). The async stage's wall clock holds a
fixed ~6 s on 2 cores (the Ray actors importing torch and loading the model, ~4.7 s, and closing the
fleet, ~1.4 s), so short runs understate the steady state: the loop ratio is that steady state.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

from pipelines.routing import stage_slice

SMOKE = ["recipe=tiny_smoke", "stages.rl.monitors.warmup_steps=0", "stages.rl.monitors.stop_on_alarm=false"]


def install_env_latency(median_s: float, sigma: float, seed: int = 0) -> None:
    """Every policy turn in this process is followed by a lognormal sleep: the environment's response."""
    import random

    import harnessrl.harness.episode as run_mod

    if getattr(run_mod.run_episode, "_bench_latency", False):
        return
    real, rng = run_mod.run_episode, random.Random(seed)

    def run_episode(policy, *args, **kwargs):
        def slow_policy(messages, tools, max_tokens):
            turn = policy(messages, tools, max_tokens)
            time.sleep(rng.lognormvariate(math.log(median_s), sigma))
            return turn

        return real(slow_policy, *args, **kwargs)

    run_episode._bench_latency = True
    run_mod.run_episode = run_episode


def build_base(root: Path) -> dict[str, Path]:
    """The smoke recipe's data and base checkpoint, as the tests' tiny_base fixture builds them."""
    from components.base import work
    from harnessrl.config import compose
    from harnessrl.data.build import build
    from harnessrl.stage import run_stage

    cfg = compose(["recipe=tiny_smoke"])
    data = build(cfg.data, root / "data")
    run_stage("base", work, json.dumps(stage_slice(cfg, "base")), str(data), "md5", None, str(root / "base"))
    return {"data": data, "base": root / "base"}


def rl_run(base: dict[str, Path], out: Path, overrides: list[str]) -> tuple[float, list[dict]]:
    from components.rl import work
    from harnessrl.config import compose
    from harnessrl.metrics import read_metrics
    from harnessrl.stage import run_stage

    cfg = compose([*SMOKE, *overrides])
    t0 = time.perf_counter()
    run_stage("rl", work, json.dumps(stage_slice(cfg, "rl")), str(base["data"]), "md5", str(base["base"]), str(out))
    return time.perf_counter() - t0, read_metrics(out / "metrics.jsonl")


def bench_async_vs_sync(args: argparse.Namespace, root: Path) -> None:
    import ray

    from harnessrl.rl.fleet import start_ray

    base = build_base(root)
    common = [
        f"stages.rl.steps={args.steps}",
        f"stages.rl.prompts_per_step={args.prompts}",
        f"stages.rl.group_size={args.group}",
    ]
    latency = (args.median_s, args.sigma)
    runs: dict[str, tuple[float, list[dict]]] = {}

    # Async first: its Ray workers get the latency from their setup hook, and this process stays unpatched.
    start_ray(
        root / "ray", num_cpus=2, runtime_env={"worker_process_setup_hook": lambda: install_env_latency(*latency)}
    )
    try:
        runs["async"] = rl_run(
            base,
            root / "async",
            [
                *common,
                "stages.rl.mode=async",
                f"stages.rl.env_workers={args.env_workers}",
                f"stages.rl.max_staleness={args.staleness}",
            ],
        )
    finally:
        ray.shutdown()
    install_env_latency(*latency)
    runs["sync"] = rl_run(base, root / "sync", [*common, "stages.rl.mode=sync"])

    trajs = args.steps * args.prompts * args.group
    print(
        f"\n== (a) async vs sync RL: {args.steps} steps x {args.prompts} prompts x {args.group} episodes = {trajs} "
        f"trained trajectories each; env latency per turn lognormal(median {args.median_s} s, sigma {args.sigma}); "
        f"async max_staleness {args.staleness}, {args.env_workers} env worker(s) =="
    )
    rows = {
        "stage wall clock s": lambda t, m: f"{t:.1f}",
        "loop s (sum of steps)": lambda t, m: f"{sum(r['step_s'] for r in m):.1f}",
        "waiting for rollouts s": lambda t, m: f"{sum(r['wait_s'] for r in m):.1f}",
        "trained trajectories": lambda t, m: f"{len(m) * args.prompts * args.group}",
        "mean staleness": lambda t, m: f"{sum(r['staleness'] for r in m) / len(m):.2f}",
        "dropped stale groups": lambda t, m: f"{sum(r['dropped_stale_groups'] for r in m)}",
        "turns per episode": lambda t, m: f"{sum(r['turns'] for r in m) / len(m):.2f}",
        "final reward": lambda t, m: f"{m[-1]['reward']:.3f}",
        "mean reward, all steps": lambda t, m: f"{sum(r['reward'] for r in m) / len(m):.3f}",
    }
    print(f"{'':<26}{'sync':>12}{'async':>12}")
    for name, cell in rows.items():
        print(f"{name:<26}{cell(*runs['sync']):>12}{cell(*runs['async']):>12}")
    (ts, ms), (ta, ma) = runs["sync"], runs["async"]
    loop_s, loop_a = sum(r["step_s"] for r in ms), sum(r["step_s"] for r in ma)
    print(
        f"speed-up async/sync: {ts / ta:.2f}x stage wall clock, {loop_s / loop_a:.2f}x loop (without the fleet's start-up and close)"
    )


def bench_weight_sync(root: Path, repeats: int = 10) -> None:
    """(d) The trainer's weights into a running rollout worker: the blob, Ray's transfer and the load
    in the worker, against writing and reading a safetensors checkpoint file (a filesystem sync); and,
    where vLLM is installed, into a running vLLM engine in place (no restart)."""
    import importlib.util
    import statistics

    import ray

    from harnessrl.config import EngineConfig
    from harnessrl.engines.weights import load_weights, weights_blob
    from harnessrl.model.checkpoint import load
    from harnessrl.rl.fleet import RolloutWorker, start_ray

    base = build_base(root)
    model, _ = load(base["base"])
    start_ray(root / "ray-sync", num_cpus=2)
    try:
        worker = RolloutWorker.remote(str(base["base"]), "float32", 1.0, EngineConfig(), 1)
        ray.get(worker.set_weights.remote(0, weights_blob(model)))  # warm-up

        def timed(fn) -> float:
            out = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                out.append(1000 * (time.perf_counter() - t0))
            return statistics.median(out)

        blob_ms = timed(lambda: weights_blob(model))
        ray_ms = timed(lambda: ray.get(worker.set_weights.remote(1, ray.put(weights_blob(model)))))
        path = root / "sync.safetensors"
        file_ms = timed(lambda: (path.write_bytes(weights_blob(model)), load_weights(model, path.read_bytes())))
    finally:
        ray.shutdown()
    vllm_ms = None
    if importlib.util.find_spec("vllm"):
        from harnessrl.engines.vllm import VLLMEngine

        engine = VLLMEngine(base["base"], EngineConfig(kind="vllm", max_model_len=1024), "float32", 1.0)
        try:
            vllm_ms = timed(lambda: engine.set_weights(1, weights_blob(model)))
        finally:
            engine.close()
    params = sum(p.numel() for p in model.parameters())
    print(f"\n== (d) weight sync, {params / 1e6:.2f}M parameters fp32, median of {repeats} ==")
    print(f"{'':<40}{'ms':>10}")
    print(f"{'serialise (safetensors blob)':<40}{blob_ms:>10.1f}")
    print(f"{'publish to a Ray rollout worker':<40}{ray_ms:>10.1f}")
    print(f"{'via a checkpoint file on disk':<40}{file_ms:>10.1f}")
    if vllm_ms is not None:
        print(f"{'into a running vLLM engine (in place)':<40}{vllm_ms:>10.1f}")
    print(f"Ray publish / file sync = {ray_ms / file_ms:.2f}x")
    if vllm_ms is not None:
        print(f"vLLM in-place sync / file sync = {vllm_ms / file_ms:.2f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--prompts", type=int, default=4, help="prompts (groups) per step")
    p.add_argument("--group", type=int, default=4, help="episodes per group")
    p.add_argument("--staleness", type=int, default=2, help="async max_staleness")
    p.add_argument("--env-workers", type=int, default=1)
    p.add_argument("--median-s", type=float, default=0.4, help="median env latency per turn, seconds")
    p.add_argument("--sigma", type=float, default=1.0, help="lognormal sigma of the env latency (the tail)")
    p.add_argument("--only", choices=["a", "d"], help="run one part: (a) async vs sync, (d) weight sync")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-rl-") as d:
        if args.only in (None, "a"):
            bench_async_vs_sync(args, Path(d) / "a")
        if args.only in (None, "d"):
            bench_weight_sync(Path(d) / "d")
    print("(b) against TRL: bench/rl_vs_trl.py; (c) rollout throughput: bench/rollout_throughput.py")


if __name__ == "__main__":
    main()
