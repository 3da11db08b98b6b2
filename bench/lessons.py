"""What RL teaches, each lesson a treatment against its ablation, over several training seeds.

    python bench/lessons.py --seeds 0 1 2 [--parallel 2] [--root DIR] [--lessons strategy drop clarify summary]

Per seed, the lessons recipe runs once (`harnessrl run recipe=tiny_lessons seed=S`: the default with
the lesson suites trained too, conf/recipe/tiny_lessons.yaml), and every other run starts from its SFT
checkpoint: the strategy ablation as a pipeline sharing that run's cache (CPT and SFT are not
run again), the hard runs as the RL stage alone (`harnessrl rl --checkpoint .../sft`):

    default         recipe=tiny_lessons: RL with the efficiency terms (turns, parallel calls)
    no_efficiency   the same with reward.turns=0 reward.parallel=0 (no long-horizon stage)
    frozen_summaries  the default with stages.long_horizon.train_summaries=false: the long-horizon
                    stage trains every turn but the summaries (CPT, SFT and RL from the default's cache)
    negative        RL on 60% lookups, 40% hard lookups (tasks/hard_lookup.py), the default reward
    drop            the same with reward=malformed_drop: a malformed episode gets no gradient
    negative_batch  negative with stages.rl.baseline=batch (one baseline per step, not per group)
    drop_batch      drop with stages.rl.baseline=batch
    quirk           negative with reward=clarify_quirk: a wrong answer costs, a question does not

The table: per lesson, the metric, the treatment, the ablation, and their difference as the mean
over seeds with its standard deviation (the spread between seeds):

    strategy   held-out multi_lookup parallel share, turns per solved task and success, after RL
               (default) against no_efficiency, and each one's change from SFT
    drop       share of hard-lookup RL episodes with a malformed turn, first 5 steps and last 5,
               drop against negative, under each baseline; the step of the first malformed incident
    clarify    share of hard-lookup RL episodes that asked the user, first 5 steps and last 5, quirk
               against negative; the step of the first clarify incident
    summary    held-out long-horizon success at the stage's context budget, the trained summary
               against the no-gradient one (frozen_summaries), truncation and the untrained summary
               (the RL checkpoint's), and the ceiling with no budget against it; summary tokens,
               trained against untrained; lookup success after the long-horizon stage against
               before it (each run's eval comparison)

It writes lessons.json and two plots beside the runs: malformed rate per step (drop against
negative) and clarify rate per step (quirk against the default reward). A run whose report exists is
read, not run again, so an interrupted sweep continues where it stopped.
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
from harnessrl.rewards.monitors import read_incidents

RECIPE = "recipe=tiny_lessons"
HARD = ["+stages.rl.mix.hard_lookup=0.4", "stages.rl.mix.lookup=0.6", "stages.rl.mix.multi_lookup=0"]
RUNS: dict[str, list[str]] = {
    "default": [],
    "no_efficiency": [
        "reward.turns=0",
        "reward.parallel=0",
        "stages.long_horizon.enabled=false",
        "stages.eval.long_horizon_tasks=0",
    ],
    "negative": HARD,
    "drop": [*HARD, "reward=malformed_drop"],
    "negative_batch": [*HARD, "stages.rl.baseline=batch"],
    "drop_batch": [*HARD, "reward=malformed_drop", "stages.rl.baseline=batch"],
    "quirk": [*HARD, "reward=clarify_quirk"],
    "frozen_summaries": ["stages.long_horizon.train_summaries=false"],
}
PIPELINE = ("default", "no_efficiency", "frozen_summaries")  # the rest run the RL stage alone
LABELS = {"negative": "negative (default reward)", "negative_batch": "negative", "drop_batch": "drop",
          "quirk": "reward=clarify_quirk"}  # fmt: skip
LESSONS = {
    "strategy": ["default", "no_efficiency"],
    "drop": ["negative", "drop", "negative_batch", "drop_batch"],
    "clarify": ["negative", "quirk"],
    "summary": ["default", "frozen_summaries"],  # the eval's long-horizon comparison of each
}
WINDOW = 5  # steps averaged at the start and the end of RL


def run_dir(root: Path, seed: int, name: str) -> Path:
    return root / f"seed{seed}-{name}"


def rl_dir(root: Path, seed: int, name: str) -> Path:
    """Where a run's RL stage wrote metrics.jsonl and incidents.jsonl."""
    return run_dir(root, seed, name) / ("checkpoints/rl" if name in PIPELINE else "rl")


def done(root: Path, seed: int, name: str) -> bool:
    if name in PIPELINE:
        return (run_dir(root, seed, name) / "report" / "report.json").is_file()
    return (rl_dir(root, seed, name) / "manifest.json").is_file()


def seed_chain(root: Path, seed: int, names: list[str], data: Path) -> subprocess.Popen:
    """One seed's runs, one after another: the first computes CPT and SFT, the rest start from its SFT."""
    cli = [sys.executable, "-m", "harnessrl.cli"]
    sft = run_dir(root, seed, "default") / "checkpoints" / "sft"
    steps = []
    for name in (n for n in names if not done(root, seed, n)):
        if name in PIPELINE:
            cmd = [*cli, "run", RECIPE, f"seed={seed}", f"data.dir={data}", *RUNS[name], "--output-dir",
                   str(run_dir(root, seed, name)), "--pipeline-root", str(root / f"kfp{seed}")]  # fmt: skip
        else:
            cmd = [*cli, "rl", "--checkpoint", str(sft), "-o", str(rl_dir(root, seed, name)), RECIPE,
                   f"seed={seed}", f"data.dir={data}", *RUNS[name]]  # fmt: skip
        steps.append(f"echo '== {name}' && {shlex.join(cmd)}")
    env = os.environ | {"HARNESSRL_THREADS": "1", "OMP_NUM_THREADS": "1"}
    log = (root / f"seed{seed}.log").open("a")
    print(f"seed {seed}: {len(steps)} runs to go (log {log.name})", flush=True)
    return subprocess.Popen(["bash", "-c", " && ".join(steps) or "true"], stdout=log, stderr=subprocess.STDOUT,
                            env=env)  # fmt: skip


# ----------------------------------------------------------------------------- read one run


def eval_rows(root: Path, seed: int, name: str, stage: str, suite: str) -> list[dict]:
    """The eval's episode rows of one checkpoint on one suite."""
    path = run_dir(root, seed, name) / "report" / "episodes.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if r["stage"] == stage and r["suite"] == suite]


def strategy(rows: list[dict]) -> dict[str, float]:
    """Parallel share of turns, turns per solved episode, and success, of eval episode rows."""
    solved = [r for r in rows if r["success"]]
    return {
        "parallel_share": sum(r["parallel_turns"] for r in rows) / max(1, sum(r["turns"] for r in rows)),
        "turns_per_solved": statistics.mean(r["turns"] for r in solved) if solved else math.nan,
        "success": len(solved) / max(1, len(rows)),
    }


def rl_steps(root: Path, seed: int, name: str) -> list[dict]:
    return read_metrics(rl_dir(root, seed, name) / "metrics.jsonl")


def first_incident(root: Path, seed: int, name: str, monitor: str, suite: str) -> int | None:
    """The step of the RL stage's first incident of `monitor` on `suite`'s episodes, if any."""
    incidents = read_incidents(rl_dir(root, seed, name) / "incidents.jsonl")
    return next((i["step"] for i in incidents if i["monitor"] == monitor and i["suite"] == suite), None)


def series(steps: list[dict], key: str) -> list[float]:
    """A per-step metric; a step with no episode of the suite has none (nan)."""
    return [float(s.get(key, math.nan)) for s in steps]


def window_mean(xs: list[float], end: bool) -> float:
    part = [x for x in (xs[-WINDOW:] if end else xs[:WINDOW]) if not math.isnan(x)]
    return statistics.mean(part) if part else math.nan


# ----------------------------------------------------------------------------- the table


def spread(xs: list[float]) -> str:
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return "-"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):+.3f} ± {sd:.3f}"


def mean(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.mean(xs) if xs else math.nan


def lesson_rows(root: Path, seeds: list[int], lessons: list[str]) -> list[dict]:
    """One row per (lesson, metric): per-seed treatment and ablation values, and their differences."""
    rows = []

    def add(lesson: str, metric: str, treat: list[float], ablate: list[float]) -> None:
        rows.append({"lesson": lesson, "metric": metric, "treatment": treat, "ablation": ablate,
                     "difference": [t - a for t, a in zip(treat, ablate, strict=True)]})  # fmt: skip

    if "strategy" in lessons:
        per = {
            (s, n, st): strategy(eval_rows(root, s, n, st, "multi_lookup"))
            for s in seeds
            for n in LESSONS["strategy"]
            for st in ("sft", "rl")
        }
        for key in ("parallel_share", "turns_per_solved", "success"):
            sft = [per[s, "default", "sft"][key] for s in seeds]
            treat = [per[s, "default", "rl"][key] for s in seeds]
            ablate = [per[s, "no_efficiency", "rl"][key] for s in seeds]
            add("strategy", f"multi_lookup {key}, RL", treat, ablate)
            add("strategy", f"multi_lookup {key}, RL - SFT", [t - b for t, b in zip(treat, sft, strict=True)],
                [a - b for a, b in zip(ablate, sft, strict=True)])  # fmt: skip
        lookup = {
            n: [strategy(eval_rows(root, s, n, "rl", "lookup"))["success"] for s in seeds] for n in LESSONS["strategy"]
        }
        add("strategy", "lookup success, RL", lookup["default"], lookup["no_efficiency"])
    if "drop" in lessons:
        for tag in ("", "_batch"):
            drop, neg = f"drop{tag}", f"negative{tag}"
            curves = {
                n: [series(rl_steps(root, s, n), "malformed_episodes/hard_lookup") for s in seeds] for n in (drop, neg)
            }
            baseline = "batch" if tag else "group"
            for end in (False, True):
                label = f"last {WINDOW} steps" if end else f"first {WINDOW} steps"
                add("drop", f"hard malformed episodes, {label} ({baseline})",
                    [window_mean(c, end) for c in curves[drop]], [window_mean(c, end) for c in curves[neg]])  # fmt: skip
            hard_success = {n: [window_mean(series(rl_steps(root, s, n), "success/hard_lookup"), True) for s in seeds]
                            for n in (drop, neg)}  # fmt: skip
            add("drop", f"hard success, last {WINDOW} steps ({baseline})", hard_success[drop], hard_success[neg])
            easy = {n: [window_mean(series(rl_steps(root, s, n), "malformed_episodes/lookup"), True) for s in seeds]
                    for n in (drop, neg)}  # fmt: skip
            add("drop", f"lookup malformed episodes, last {WINDOW} steps ({baseline})", easy[drop], easy[neg])
            first = {n: [first_incident(root, s, n, "malformed", "hard_lookup") for s in seeds] for n in (drop, neg)}
            rows.append({"lesson": "drop", "metric": f"first malformed incident on hard_lookup, step ({baseline})",
                         "treatment": first[drop], "ablation": first[neg], "difference": None})  # fmt: skip
    if "clarify" in lessons:
        curves = {n: [series(rl_steps(root, s, n), "asked/hard_lookup") for s in seeds] for n in ("quirk", "negative")}
        for end in (False, True):
            label = f"last {WINDOW} steps" if end else f"first {WINDOW} steps"
            add("clarify", f"hard episodes that asked, {label}",
                [window_mean(c, end) for c in curves["quirk"]], [window_mean(c, end) for c in curves["negative"]])  # fmt: skip
        first = {
            n: [first_incident(root, s, n, "clarify", "hard_lookup") for s in seeds] for n in ("quirk", "negative")
        }
        rows.append({"lesson": "clarify", "metric": "first clarify incident on hard_lookup, step", "treatment": first["quirk"],
                     "ablation": first["negative"], "difference": None})  # fmt: skip
    if "summary" in lessons:
        lh = [json.loads((run_dir(root, s, "default") / "report" / "report.json").read_text())["long_horizon"]
              for s in seeds]  # fmt: skip
        got = lambda method: [r[method]["success"]["value"] for r in lh]
        frozen = [json.loads((run_dir(root, s, "frozen_summaries") / "report" / "report.json").read_text())
                  ["long_horizon"]["trained_summary"]["success"]["value"] for s in seeds]  # fmt: skip
        # The isolating control: the same stage, steps and seed, with no gradient on the summary turns.
        add("summary", "long-horizon success, trained / no-gradient summary", got("trained_summary"), frozen)
        add("summary", "long-horizon success, trained summary / truncation", got("trained_summary"),
            got("truncation"))  # fmt: skip
        add("summary", "long-horizon success, trained / untrained summary", got("trained_summary"),
            got("untrained_summary"))  # fmt: skip
        add("summary", "long-horizon success, no budget / trained summary", got("no_budget"), got("trained_summary"))
        tokens = {m: [r[m]["summary_tokens"] for r in lh] for m in ("trained_summary", "untrained_summary")}
        add("summary", "tokens per summary, trained / untrained", tokens["trained_summary"],
            tokens["untrained_summary"])  # fmt: skip
        lookup = {st: [strategy(eval_rows(root, s, "default", st, "lookup"))["success"] for s in seeds]
                  for st in ("long_horizon", "rl")}  # fmt: skip
        add("summary", "lookup success, after / before the long-horizon stage", lookup["long_horizon"], lookup["rl"])
    return rows


def print_table(rows: list[dict], seeds: list[int]) -> None:
    pairs = {"strategy": "default / no_efficiency", "drop": "drop / negative", "clarify": "quirk / default",
             "summary": "as the metric says"}  # fmt: skip
    print(f"\nseeds {seeds}; treatment and ablation: mean over seeds; difference: mean ± sd over seeds\n")
    head = f"{'lesson':<9} {'metric':<52} {'treatment':>10} {'ablation':>10} {'difference':>17}"
    print(head + "\n" + "-" * len(head))
    for r in rows:
        if r["difference"] is None:  # incident steps: one per seed, '-' where none fired
            show = lambda xs: ",".join("-" if x is None else str(x) for x in xs)
            print(f"{r['lesson']:<9} {r['metric']:<52} {show(r['treatment']):>10} {show(r['ablation']):>10}")
            continue
        print(f"{r['lesson']:<9} {r['metric']:<52} {mean(r['treatment']):>10.3f} {mean(r['ablation']):>10.3f} "
              f"{spread(r['difference']):>17}")  # fmt: skip
    print("\n" + "; ".join(f"{k}: {v}" for k, v in pairs.items()))


def plot(root: Path, seeds: list[int], lessons: list[str]) -> list[Path]:
    """Side-by-side curves per step, mean over seeds with the seeds' range shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def draw(ax, names: list[str], key: str, ylabel: str) -> None:
        for name in names:
            curves = [series(rl_steps(root, s, name), key) for s in seeds]
            n = min(len(c) for c in curves)
            steps = list(range(1, n + 1))
            mid = [mean([c[i] for c in curves]) for i in range(n)]
            lo = [min((c[i] for c in curves if not math.isnan(c[i])), default=math.nan) for i in range(n)]
            hi = [max((c[i] for c in curves if not math.isnan(c[i])), default=math.nan) for i in range(n)]
            ax.plot(steps, mid, label=LABELS.get(name, name))
            ax.fill_between(steps, lo, hi, alpha=0.2)
        ax.set_xlabel("RL step")
        ax.set_ylabel(ylabel)
        ax.legend()

    out = []
    if "drop" in lessons:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), sharey=True)
        for ax, tag in zip(axes, ("", "_batch"), strict=True):
            draw(
                ax,
                [f"negative{tag}", f"drop{tag}"],
                "malformed_episodes/hard_lookup",
                "hard episodes with a malformed turn",
            )
            ax.set_title(f"malformed calls on hard tasks ({'batch' if tag else 'group'} baseline)")
        out.append(root / "lessons_malformed.png")
        fig.tight_layout()
        fig.savefig(out[-1], dpi=110)
    if "clarify" in lessons:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        draw(ax, ["negative", "quirk"], "asked/hard_lookup", "hard episodes that asked the user")
        ax.set_title("clarifying questions: quirk against the default reward")
        out.append(root / "lessons_clarify.png")
        fig.tight_layout()
        fig.savefig(out[-1], dpi=110)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--parallel", type=int, default=2, help="seeds run at a time (default: %(default)s)")
    p.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "harnessrl-lessons")
    p.add_argument("--lessons", nargs="+", choices=list(LESSONS), default=list(LESSONS))
    p.add_argument("--report-only", action="store_true", help="read the runs there are; run nothing")
    args = p.parse_args()
    if args.parallel < 1:
        p.error("--parallel must be at least 1")
    args.root.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(["default", *(n for lesson in args.lessons for n in LESSONS[lesson])]))
    data = args.root / "data"
    if not args.report_only:
        if not data.exists():
            subprocess.run([sys.executable, "-m", "harnessrl.cli", "data", "build", f"data.dir={data}"], check=True)
        todo, running, t0 = list(args.seeds), {}, time.monotonic()
        while todo or running:
            while todo and len(running) < args.parallel:
                seed = todo.pop(0)
                running[seed] = seed_chain(args.root, seed, names, data)
            time.sleep(5)
            for seed, proc in list(running.items()):
                if proc.poll() is not None:
                    del running[seed]
                    if proc.returncode:
                        sys.exit(f"seed {seed} failed (exit {proc.returncode}); see {args.root / f'seed{seed}.log'}")
                    print(f"seed {seed}: done at {time.monotonic() - t0:.0f} s", flush=True)
    rows = lesson_rows(args.root, args.seeds, args.lessons)
    print_table(rows, args.seeds)
    (args.root / "lessons.json").write_text(json.dumps({"seeds": args.seeds, "rows": rows}, indent=1) + "\n")
    for path in plot(args.root, args.seeds, args.lessons):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
