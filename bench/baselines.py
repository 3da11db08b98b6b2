"""Honest baselines for one finished run: is RL better than more SFT, or than SFT on its own wins?

    sft_more  SFT continued from the SFT checkpoint on the SFT data, for as many trained tokens as
              the RL stage trained on (trained tokens: tokens that carry a loss; RL trains on its
              sampled turns, SFT on the expert's turns)
    rft       rejection-sampling fine-tuning: the SFT checkpoint samples as many episodes as RL did
              (dynamic sampling's refills included), on RL's training prompts, in RL's harness and
              at RL's temperature; then SFT on the successful episodes, for the same trained tokens

Both train with the SFT stage's own code and config (components/sft.py; only `steps` differs) and
are evaluated exactly as the eval stage evaluated the chain: its held-out lookup tasks, seeds and
budgets. So their success lines up with the report's `sft` and `rl` figures.

    python bench/baselines.py RUN_DIR [RUN_DIR ...]

RUN_DIR is a finished `harnessrl run --output-dir` folder. The figures go to RUN_DIR/baselines.json
(read back, not recomputed, on a second call); bench/seeds.py adds them to its per-seed table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import yaml

from harnessrl.config import Config, TrainConfig
from harnessrl.data.build import data_folder, read_jsonl
from harnessrl.harness.spec import HARNESS_FILE
from harnessrl.io import write_json
from harnessrl.metrics import read_metrics
from harnessrl.stage import StageContext
from pipelines.routing import stage_slice

RESULT = "baselines.json"


def rl_budget(rl_dir: Path, cfg: Config) -> tuple[int, int]:
    """What the RL stage spent: trained tokens, and episodes sampled (refills and stale drops included)."""
    rows = read_metrics(rl_dir / "metrics.jsonl")
    rl = cfg.stages.rl
    groups = sum(rl.prompts_per_step + r.get("refill_groups", 0) + r.get("dropped_stale_groups", 0) for r in rows)
    return sum(r["trained_tokens"] for r in rows), groups * rl.group_size


def sft_steps(rows: list[dict], tok, sft: TrainConfig, tokens: int) -> int:
    """Optimizer steps of SFT on these conversations (sft.jsonl rows) that train on about `tokens` tokens."""
    from harnessrl.model.tokenizer import render_ids

    per_conversation = sum(sum(render_ids(tok, r["messages"])[1]) for r in rows) / len(rows)
    return max(1, math.ceil(tokens / (per_conversation * sft.micro_batch_size * sft.grad_accum)))


def finetune(cfg: Config, parent: Path, rows: list[dict], steps: int, data_dir: Path, out: Path):
    """The SFT stage on `rows` (sft.jsonl's: messages and suite, so the stage's own `mix` applies) from
    `parent`, for `steps` steps, into `out`."""
    from components.sft import work

    stage = cfg.stages.sft.model_copy(update={"steps": steps, "checkpoint_every": 0})
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="harnessrl-baseline-") as tmp:
        (Path(tmp) / "sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (Path(tmp) / HARNESS_FILE).write_text((data_dir / HARNESS_FILE).read_text())
        slice_ = stage_slice(cfg, "sft") | {"stage": stage.model_dump()}
        work(StageContext(cfg=slice_, parent=parent, out=out, data_dir=Path(tmp)))


def rejection_samples(cfg: Config, sft_dir: Path, data_dir: Path, episodes: int) -> tuple[list[dict], int]:
    """`episodes` episodes of the SFT checkpoint on RL's prompts, in groups of `group_size` and
    batches of `prompts_per_step` distinct prompts drawn uniformly (RL's `uniform` curriculum: the
    SFT policy's pass rates are what RFT samples, so nothing steers the draw); the successful ones'
    conversations as sft.jsonl rows, and how many episodes ran."""
    from harnessrl.engines.hf import HFEngine
    from harnessrl.harness.episode import BASE_UID
    from harnessrl.model.checkpoint import load
    from harnessrl.model.prompts import PromptRenderer
    from harnessrl.rl.rollouts import run_group
    from harnessrl.tasks.task import Task

    rl = cfg.stages.rl
    tasks = [Task.model_validate(r["task"]) for r in read_jsonl(data_dir / "prompts.jsonl")]
    tasks = [t for t in tasks if t.suite in rl.mix]
    model, tok = load(sft_dir, cfg.model.dtype)
    renderer, engine = PromptRenderer(tok, model.config.max_position_embeddings), HFEngine(model, tok, rl.temperature)
    rng, wins, batch = random.Random(cfg.seed), [], rl.prompts_per_step * rl.group_size
    for b, start in enumerate(range(0, episodes, batch)):
        groups = rng.sample(tasks, min(rl.prompts_per_step, len(tasks)))
        todo = [t for t in groups for _ in range(rl.group_size)][: episodes - start]
        uids = range(BASE_UID, BASE_UID + len(todo))
        trajs, _ = run_group(todo, data_dir, rl.budgets(), renderer, engine.generate, cfg.seed + b, uids)
        wins += [{"messages": tr.messages, "suite": t.suite} for t, tr in zip(todo, trajs, strict=True)
                 if tr.outcome.success]  # fmt: skip
        if (b + 1) % 10 == 0:
            print(f"[rft] sampled {start + len(todo):,}/{episodes:,} episodes, {len(wins):,} successful", flush=True)
    return wins, episodes


def success(cfg: Config, ckpt: Path, data_dir: Path) -> dict:
    """Held-out lookup success (with its Wilson interval) and malformed-turn share, by the eval
    stage's own metrics (harnessrl/report/metrics.py)."""
    from harnessrl.report.episodes import checkpoint_rows
    from harnessrl.report.heldout import load_heldout
    from harnessrl.report.metrics import suite_metrics

    ev = cfg.stages.eval
    tasks = [t for t in load_heldout(data_dir, {"lookup": 1.0}, ev.num_tasks) if t.source is None]
    m = suite_metrics(checkpoint_rows(ckpt, tasks, data_dir, ev, cfg.model.dtype, cfg.engine), False)
    return {
        "success": m["success"]["value"],
        "success_ci": [m["success"]["lo"], m["success"]["hi"]],
        "malformed": m["malformed"]["value"],
        "episodes": m["episodes"],
    }


def baselines(run_dir: Path) -> dict:
    """Train and evaluate `sft_more` and `rft` for one run; cached in run_dir/baselines.json."""
    done = run_dir / RESULT
    if done.is_file():
        return json.loads(done.read_text())
    import torch

    from harnessrl.model.checkpoint import load

    # As the stages do (harnessrl/stage.py): the run's seed, and HARNESSRL_THREADS threads.
    torch.set_num_threads(max(1, int(os.environ.get("HARNESSRL_THREADS", os.cpu_count() or 1))))
    cfg = Config.model_validate(yaml.safe_load((run_dir / "config.yaml").read_text()))
    ckpts, data_dir = run_dir / "checkpoints", data_folder(cfg.data)
    if not (ckpts / "rl" / "metrics.jsonl").is_file():
        raise SystemExit(f"{run_dir}: no finished RL stage (checkpoints/rl/metrics.jsonl)")
    torch.manual_seed(cfg.seed)
    tokens, episodes = rl_budget(ckpts / "rl", cfg)
    tok = load(ckpts / "sft", cfg.model.dtype)[1]
    out: dict = {"rl_trained_tokens": tokens, "rl_episodes": episodes}
    with tempfile.TemporaryDirectory(prefix="harnessrl-baselines-") as tmp:
        t0 = time.monotonic()
        expert = read_jsonl(data_dir / "sft.jsonl")
        steps = sft_steps(expert, tok, cfg.stages.sft, tokens)
        finetune(cfg, ckpts / "sft", expert, steps, data_dir, Path(tmp) / "sft_more")
        out["sft_more"] = success(cfg, Path(tmp) / "sft_more", data_dir) | {"steps": steps,
                                                                           "wall_s": time.monotonic() - t0}  # fmt: skip
        t0 = time.monotonic()
        wins, sampled = rejection_samples(cfg, ckpts / "sft", data_dir, episodes)
        out["rft"] = {"sampled": sampled, "kept": len(wins)}
        if len(wins) >= cfg.stages.sft.micro_batch_size:
            steps = sft_steps(wins, tok, cfg.stages.sft, tokens)
            finetune(cfg, ckpts / "sft", wins, steps, data_dir, Path(tmp) / "rft")
            out["rft"] |= success(cfg, Path(tmp) / "rft", data_dir) | {"steps": steps}
        else:  # too few wins for one batch: RFT has nothing to train on, and stays the SFT checkpoint
            out["rft"] |= success(cfg, ckpts / "sft", data_dir) | {"steps": 0}
        out["rft"]["wall_s"] = time.monotonic() - t0
    write_json(done, out)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", type=Path, nargs="+", help="finished `harnessrl run --output-dir` folders")
    args = p.parse_args()
    for run_dir in args.runs:
        if not (run_dir / "config.yaml").is_file():
            sys.exit(f"{run_dir}: not a run folder (no config.yaml)")
        b = baselines(run_dir)
        print(f"{run_dir}: RL trained {b['rl_trained_tokens']:,} tokens on {b['rl_episodes']:,} episodes; "
              f"sft_more {b['sft_more']['success']:.3f} ({b['sft_more']['steps']} steps), "
              f"rft {b['rft']['success']:.3f} ({b['rft']['kept']}/{b['rft']['sampled']} episodes kept, "
              f"{b['rft']['steps']} steps)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
