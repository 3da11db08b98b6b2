"""`harnessrl rl`: the RL stage alone on a checkpoint, for quick experiments."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

from harnessrl.cli.common import EXIT_BAD_INPUT, add_overrides
from harnessrl.config import compose
from harnessrl.rl import placement
from pipelines.routing import stage_slice


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rl",
        help="run the RL stage alone on a checkpoint, for quick experiments",
        description="Run one RL stage (the same code as in `harnessrl run`) on CHECKPOINT, with the recipe's "
        "stage, reward and engine config and any overrides. Writes a checkpoint folder with metrics.jsonl, "
        "incidents.jsonl and a lineage manifest whose parent is CHECKPOINT. Run it again with the same -o "
        "after a kill and it resumes from the last saved step.",
        epilog="example:\n  harnessrl rl --checkpoint runs/tiny-x/checkpoints/sft stages.rl.steps=40 stages.rl.lr=1e-4",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", type=Path, required=True, metavar="PATH", help="the policy to start from")
    p.add_argument("--stage", choices=["rl", "long_horizon"], default="rl", help="whose config (default: %(default)s)")
    p.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help="the data folder (default: the one the manifest names, else the data config's own)",
    )
    p.add_argument("-o", "--output", type=Path, metavar="OUT", help="default: runs/<stage>-<time>")
    add_overrides(p)


def cmd_rl(args: argparse.Namespace) -> int:
    from harnessrl.data.build import data_folder
    from harnessrl.data.md5 import dvc_dir_md5
    from harnessrl.lineage.manifest import MANIFEST
    from harnessrl.model.checkpoint import CheckpointError
    from harnessrl.stage import run_stage

    cfg = compose(args.overrides)  # validates before anything is written
    placement.preflight(cfg)  # a placement this machine's Ray never offers would leave actors pending
    if not (args.checkpoint / "config.json").is_file():
        print(f"harnessrl: error: --checkpoint {args.checkpoint}: not a Hugging Face checkpoint", file=sys.stderr)
        return EXIT_BAD_INPUT
    manifest = json.loads((args.checkpoint / MANIFEST).read_text()) if (args.checkpoint / MANIFEST).is_file() else {}
    recorded = manifest.get("datasets", {}).get("data", {}).get("path")
    # A checkpoint from a cluster records a path inside its pod: then the data config's own folder here.
    data = args.data or (Path(recorded) if recorded and Path(recorded).is_dir() else data_folder(cfg.data))
    if not (data / "prompts.jsonl").is_file():
        print(
            f"harnessrl: error: --data {data}: no prompts.jsonl (build it with `harnessrl data build`)", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    if args.stage == "rl":
        from components.rl import work
    else:
        from components.long_horizon_rl import work
    out = args.output or Path("runs") / f"{args.stage}-{datetime.now():%Y%m%d-%H%M%S}"
    slice_ = json.dumps(stage_slice(cfg, args.stage))
    try:
        run_stage(args.stage, work, slice_, str(data.resolve()), dvc_dir_md5(data), str(args.checkpoint.resolve()),
                  str(out))  # fmt: skip
    except (CheckpointError, ValueError) as e:
        print(f"harnessrl: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{args.stage} checkpoint: {out}")
    return 0
