"""The default recipe over several training seeds: does RL help on every seed, and by how much?

Runs `harnessrl run seed=S` for each seed, two at a time with one thread each (this machine has two
cores), all on one data folder built once (the seed changes training, never the data), then prints
one row per seed and the mean and spread:

    sft, rl, final   held-out lookup success after SFT, after RL, after the last stage
    gain             rl - sft, in points
    malformed        share of malformed turns after RL
    turns/solved     assistant turns per solved task, after SFT and after RL
    uniform          mean share of RL groups whose rewards were all equal (no gradient)
    entropy          the policy's token entropy at RL's last step, nats per token
    sft_more, rft    the honest baselines of bench/baselines.py, on the same held-out tasks, and
    rl-sft_more ...  RL's lead over each, in points (--no-baselines skips them)

    python bench/seeds.py [--seeds 0 1 2 3 4] [--parallel 2] [--root DIR] [--tag T] [-- OVERRIDE ...]

Overrides after `--` go to every run, e.g. `-- stages.rl.refill_groups=8 stages.rl.curriculum=pass_rate`.
With `--tag=-ds` the runs go to seedS-ds/ and share each seed's pipeline cache with the untagged
sweep, so an ablation of RL settings reruns RL and what follows, not SFT.
A seed whose run directory already holds a report (and baselines.json) is read, not run again, so
an interrupted sweep continues where it stopped. Runs live under --root (outside the checkout by default).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harnessrl.metrics import read_metrics

sys.path.insert(0, str(Path(__file__).parent))
import baselines  # bench/baselines.py, beside this script


def run_seed(
    seed: int, root: Path, tag: str, data: Path, overrides: list[str], with_baselines: bool
) -> subprocess.Popen:
    """One seed's job: the run (unless its report exists), then its baselines (bench/baselines.py)."""
    # The pipeline root is shared across tags, so a second sweep with other RL overrides reuses each
    # seed's cached CPT and SFT steps and reruns only what the overrides change.
    run_dir = root / f"seed{seed}{tag}"
    run = [sys.executable, "-m", "harnessrl.cli", "run", f"seed={seed}", f"data.dir={data}", *overrides,
           "--output-dir", str(run_dir), "--pipeline-root", str(root / f"kfp{seed}")]  # fmt: skip
    steps = [] if (run_dir / "report" / "report.json").is_file() else [shlex.join(run)]
    if with_baselines:
        steps.append(shlex.join([sys.executable, str(Path(__file__).with_name("baselines.py")), str(run_dir)]))
    env = os.environ | {"HARNESSRL_THREADS": "1", "OMP_NUM_THREADS": "1"}
    log = (root / f"seed{seed}{tag}.log").open("a")
    print(f"seed {seed}: running (log {log.name})", flush=True)
    return subprocess.Popen(["bash", "-c", " && ".join(steps)], stdout=log, stderr=subprocess.STDOUT, env=env)


def episodes_by_stage(report_dir: Path) -> dict[str, list[dict]]:
    by: dict[str, list[dict]] = {}
    for line in (report_dir / "episodes.jsonl").read_text().splitlines():
        row = json.loads(line)
        by.setdefault(row["stage"], []).append(row)
    return by


def seed_row(run_dir: Path) -> dict:
    """One seed's figures, from its report and its RL metrics."""
    report = json.loads((run_dir / "report" / "report.json").read_text())
    success = {r["stage"]: r["suites"]["lookup"]["success"]["value"] for r in report["results"]}
    malformed = {r["stage"]: r["suites"]["lookup"]["malformed"]["value"] for r in report["results"]}
    episodes = episodes_by_stage(run_dir / "report")
    turns_solved = {}
    for stage in ("sft", "rl"):
        solved = [e for e in episodes.get(stage, []) if e.get("suite", "lookup") == "lookup" and e["success"]]
        turns_solved[stage] = statistics.mean(e["turns"] for e in solved) if solved else float("nan")
    # A sweep with RL switched off (an SFT ablation) has no rl row: its RL columns are blank (nan).
    nan = float("nan")
    metrics = run_dir / "checkpoints" / "rl" / "metrics.jsonl"
    rl = read_metrics(metrics) if metrics.is_file() else [{}]
    last = [r["stage"] for r in report["results"]][-1]
    return {
        "sft": success["sft"],
        "rl": success.get("rl", nan),
        "final": success[last],
        "gain": 100 * (success.get("rl", nan) - success["sft"]),
        "malformed": malformed.get("rl", nan),
        "turns/solved sft": turns_solved["sft"],
        "turns/solved rl": turns_solved["rl"],
        "uniform": statistics.mean(r.get("uniform_groups", nan) for r in rl),
        "entropy": rl[-1].get("entropy", nan),
    } | baseline_columns(run_dir, success.get("rl", nan))


def baseline_columns(run_dir: Path, rl: float) -> dict:
    """sft_more and rft (bench/baselines.py), and RL's lead over each in points, where computed."""
    path = run_dir / baselines.RESULT
    if not path.is_file():
        return {}
    b = json.loads(path.read_text())
    more, rft = b["sft_more"]["success"], b["rft"]["success"]
    return {"sft_more": more, "rft": rft, "rl-sft_more": 100 * (rl - more), "rl-rft": 100 * (rl - rft)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--parallel", type=int, default=2, help="runs at a time (default: %(default)s)")
    p.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "harnessrl-seeds")
    p.add_argument("--no-baselines", action="store_true", help="skip sft_more and rft (bench/baselines.py)")
    p.add_argument("--tag", default="", help="suffix of each run's folder, for a sweep with other overrides")
    p.add_argument("overrides", nargs="*", help="config overrides for every run (after --)")
    args = p.parse_args()
    if args.parallel < 1:
        p.error("--parallel must be at least 1")
    args.root.mkdir(parents=True, exist_ok=True)
    data = args.root / "data"
    data_overrides = [o for o in args.overrides if o.startswith("data.")]
    if not data.exists():
        subprocess.run([sys.executable, "-m", "harnessrl.cli", "data", "build", *data_overrides,
                        f"data.dir={data}"], check=True)  # fmt: skip

    def done(seed: int) -> bool:
        run_dir = args.root / f"seed{seed}{args.tag}"
        return (run_dir / "report" / "report.json").is_file() and (
            args.no_baselines or (run_dir / baselines.RESULT).is_file()
        )

    def reported(seed: int) -> bool:
        return (args.root / f"seed{seed}{args.tag}" / "report" / "report.json").is_file()

    todo = [s for s in args.seeds if not done(s)]
    running: dict[int, subprocess.Popen] = {}
    t0 = time.monotonic()
    while todo or running:
        while todo and len(running) < args.parallel:
            seed = todo.pop(0)
            running[seed] = run_seed(seed, args.root, args.tag, data, args.overrides, not args.no_baselines)
        time.sleep(5)
        for seed, proc in list(running.items()):
            if proc.poll() is not None:
                del running[seed]
                state = "done" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
                print(f"seed {seed}: {state} after {time.monotonic() - t0:.0f} s", flush=True)

    rows = {s: seed_row(args.root / f"seed{s}{args.tag}") for s in args.seeds if reported(s)}
    if not rows:
        raise SystemExit("no seed finished; see the logs under " + str(args.root))
    # Columns every seed has, less those no seed measured (the RL columns of an SFT-only sweep).
    cols = [c for c in next(iter(rows.values()))
            if all(c in r for r in rows.values()) and not all(math.isnan(r[c]) for r in rows.values())]  # fmt: skip
    print("\n| seed | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for s, r in rows.items():
        print(f"| {s} | " + " | ".join(f"{r[c]:.3f}" for c in cols) + " |")
    for name, fn in (("mean", statistics.mean), ("std", statistics.pstdev), ("min", min)):
        print(f"| {name} | " + " | ".join(f"{fn([r[c] for r in rows.values()]):.3f}" for c in cols) + " |")
    print(f"\nruns under {args.root}; overrides: {' '.join(args.overrides) or '(none)'}")


if __name__ == "__main__":
    main()
