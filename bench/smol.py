"""Does RL make a real pretrained model better at real code? `recipe=smol` over several training seeds.

For each seed, `harnessrl run recipe=smol seed=S` (one at a time: each takes both cores), all on one
data folder built once (the seed changes training, never the data); then the same-compute baseline:

    sft_more   SFT continued from the seed's SFT checkpoint on the SFT conversations, for as many
               trained tokens as its RL stage trained on (bench/baselines.py's rule)

and every checkpoint on the eval stage's own held-out tasks (sources held out whole: hydra, rich,
packaging, urllib3). It prints one row per seed and the mean and spread:

    base       the imported model, zero-shot (the eval stage's first row)
    sft, rl    after SFT, after RL; gain = rl - sft, in points
    long-horizon  the eval's comparison on held-out long-horizon tasks: truncation, the untrained and
               the trained summary, and no budget (harnessrl/report/long_horizon.py)
    sft_more   the baseline above; rl-more = rl - sft_more, in points
    by suite   held-out success per suite after SFT and after RL, summed over sources
    minutes    wall time per stage; `run` is the whole `harnessrl run`, which for the first seed
               includes building the data (the pipeline's own data step only copies it)

    python bench/smol.py [--seeds 0 1 2] [--root DIR] [-- OVERRIDE ...]

A seed whose run folder holds a report (and sft_more.json) is read, not run again: a sweep split
across sessions continues where it stopped. A finished run whose config is not the recipe's now is
moved aside (seedS-stale-TIME) and run again. Results go to ROOT/smol.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

STAGES = ("data", "sft", "rl", "long_horizon", "eval")


def run_seed(seed: int, root: Path, overrides: list[str]) -> None:
    run = root / f"seed{seed}"
    if (run / "report" / "report.json").is_file():
        if not stale(run, seed, overrides):
            return
        # A finished run of another recipe (the recipe changed since): kept under a new name, never
        # mixed into this table, and run again.
        old = run.with_name(f"{run.name}-stale-{time.strftime('%Y%m%d-%H%M%S')}")
        print(f"seed {seed}: {run} ran another config of recipe=smol; moved to {old}", flush=True)
        run.rename(old)
    cmd = [sys.executable, "-m", "harnessrl.cli", "run", "recipe=smol", f"seed={seed}", *overrides,
           "--output-dir", str(run), "--pipeline-root", str(root / "kfp")]  # fmt: skip
    print("$", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    with open(root / f"seed{seed}.log", "a") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=HERE.parent).returncode
    if rc != 0:
        sys.exit(f"seed {seed}: harnessrl run exited {rc}; see {root / f'seed{seed}.log'}")
    (run / "wall.json").write_text(json.dumps({"seconds": time.monotonic() - t0}))


def stale(run: Path, seed: int, overrides: list[str]) -> bool:
    """Whether the run's resolved config differs from what `recipe=smol seed=S OVERRIDES` composes now."""
    import yaml

    from harnessrl.config import compose

    now = compose(["recipe=smol", f"seed={seed}", *overrides]).model_dump(mode="json")
    return yaml.safe_load((run / "config.yaml").read_text()) != now


def held_out(rows: list[dict]) -> dict:
    """Success over every held-out episode, and per suite (its sources together), by the eval
    stage's own metrics (harnessrl/report/metrics.py)."""
    from harnessrl.report.metrics import suite_metrics

    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["suite"].split("@")[0], []).append(r)
    return {
        "success": suite_metrics(rows, False)["success"]["value"],
        "episodes": len(rows),
        "suites": {s: suite_metrics(v, False)["success"]["value"] for s, v in sorted(by.items())},
    }


def sft_more(run: Path) -> dict:
    """bench/baselines.py's sft_more for one smol run, judged on the eval stage's whole held-out set."""
    done = run / "sft_more.json"
    if done.is_file():
        return json.loads(done.read_text())
    import torch
    import yaml

    from bench.baselines import finetune, rl_budget, sft_steps
    from harnessrl.config import Config
    from harnessrl.data.build import data_folder, read_jsonl
    from harnessrl.model.checkpoint import load
    from harnessrl.report.episodes import checkpoint_rows
    from harnessrl.report.heldout import load_heldout

    torch.set_num_threads(max(1, int(os.environ.get("HARNESSRL_THREADS", os.cpu_count() or 1))))
    cfg = Config.model_validate(yaml.safe_load((run / "config.yaml").read_text()))
    torch.manual_seed(cfg.seed)
    ckpts, data_dir = run / "checkpoints", data_folder(cfg.data)
    tokens, _ = rl_budget(ckpts / "rl", cfg)
    expert = read_jsonl(data_dir / "sft.jsonl")
    steps = sft_steps(expert, load(ckpts / "sft", cfg.model.dtype)[1], cfg.stages.sft, tokens)
    t0 = time.monotonic()
    # Kept beside the run's checkpoints (a half-written one from a killed sweep is replaced), so a
    # surprising figure can be looked at: `harnessrl agent --model RUN/sft_more ...`.
    ckpt = run / "sft_more"
    shutil.rmtree(ckpt, ignore_errors=True)
    finetune(cfg, ckpts / "sft", expert, steps, data_dir, ckpt)
    ev = cfg.stages.eval
    tasks = load_heldout(data_dir, ev.mix, ev.num_tasks)
    episodes = checkpoint_rows(ckpt, tasks, data_dir, ev, cfg.model.dtype, cfg.engine)
    (run / "sft_more.episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    out = held_out(episodes) | {"steps": steps, "rl_trained_tokens": tokens, "seconds": time.monotonic() - t0}
    done.write_text(json.dumps(out, indent=2) + "\n")
    return out


def seed_row(run: Path) -> dict:
    episodes = [json.loads(line) for line in (run / "report" / "episodes.jsonl").read_text().splitlines()]
    names = dict.fromkeys(e["stage"] for e in episodes)
    stages = {s: held_out([e for e in episodes if e["stage"] == s]) for s in names}
    summary = {r["stage"]: r["seconds"] for r in json.loads((run / "summary.json").read_text())["stages"]}
    wall = json.loads((run / "wall.json").read_text())["seconds"] / 60 if (run / "wall.json").is_file() else None
    sft, rl = stages["sft"]["suites"], stages["rl"]["suites"]
    more = sft_more(run)
    report = json.loads((run / "report" / "report.json").read_text())
    lh = report.get("long_horizon") or {}
    return {
        "base": stages["base"]["success"],
        "sft": stages["sft"]["success"],
        "rl": stages["rl"]["success"],
        "sft_more": more["success"],
        "gain": 100 * (stages["rl"]["success"] - stages["sft"]["success"]),
        "rl-more": 100 * (stages["rl"]["success"] - more["success"]),
        "episodes": stages["rl"]["episodes"],
        "suites": {s: {"sft": sft[s], "rl": rl[s]} for s in rl},
        "minutes": {s: summary[s] / 60 for s in STAGES if s in summary} | {"run": wall},
        # The eval's long-horizon comparison on held-out long-horizon tasks, where the recipe has one.
        "long_horizon": {m: v["success"]["value"] for m, v in lh.items() if isinstance(v, dict) and "success" in v},
    }


POINTS = ("gain", "rl-more")  # differences in points; the other columns are success rates


def cell(col: str, value: float) -> str:
    return f"{value:+9.1f}" if col in POINTS else f"{value:9.3f}"


def spread(col: str, values: list[float]) -> str:
    mean = statistics.mean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:+6.1f} ± {sd:.1f}" if col in POINTS else f"{mean:6.3f} ± {sd:.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "harnessrl-smol")
    p.add_argument("overrides", nargs="*", help="after --: overrides for every run")
    args = p.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    rows = {}
    for seed in args.seeds:
        run_seed(seed, args.root, args.overrides)
        rows[seed] = seed_row(args.root / f"seed{seed}")
        (args.root / "smol.json").write_text(json.dumps(rows, indent=2) + "\n")
    cols = ("base", "sft", "rl", "sft_more", "gain", "rl-more")
    print(f"{'seed':>6} " + " ".join(f"{c:>9}" for c in cols) + "   episodes")
    for seed, r in rows.items():
        print(f"{seed:>6} " + " ".join(cell(c, r[c]) for c in cols) + f"   {r['episodes']}")
    print(f"{'mean':>6} " + " ".join(f"{spread(c, [r[c] for r in rows.values()]):>9}" for c in cols))
    print("\nheld-out success by suite (mean over seeds): sft -> rl")
    for suite in next(iter(rows.values()))["suites"]:
        sft = statistics.mean(r["suites"][suite]["sft"] for r in rows.values())
        rl = statistics.mean(r["suites"][suite]["rl"] for r in rows.values())
        print(f"  {suite:<14} {sft:.3f} -> {rl:.3f}")
    methods = list(next(iter(rows.values()))["long_horizon"])
    if methods:
        print("\nheld-out long-horizon success, by how the context is handled")
        print(f"{'seed':>6} " + " ".join(f"{m:>17}" for m in methods))
        for seed, r in rows.items():
            print(f"{seed:>6} " + " ".join(f"{r['long_horizon'].get(m, float('nan')):>17.3f}" for m in methods))
    print("\nminutes per stage (mean over seeds): " + ", ".join(
        f"{s} {statistics.mean(r['minutes'][s] for r in rows.values()):.1f}"
        for s in (*STAGES, "run") if all(r["minutes"].get(s) is not None for r in rows.values())))  # fmt: skip


if __name__ == "__main__":
    main()
