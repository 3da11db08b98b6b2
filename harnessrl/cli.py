"""`harnessrl ...`: parse arguments, call the library, print. No logic of its own.

Every command that takes a recipe takes Hydra overrides as plain arguments, e.g.
    harnessrl run recipe=tiny stages.cpt.steps=50 stages.rl.enabled=false
A bad override exits 2 with one line naming the field, before anything is written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path

import yaml

from harnessrl.config import Config, ConfigError, compose

EXIT_BAD_INPUT = 2

EPILOG = """\
overrides are Hydra syntax: key=value to change, +key=value to add, ~key to delete, group=option
to pick a config group option. Examples:
  harnessrl run                                  # the default recipe (tiny) on this machine
  harnessrl run recipe=tiny_smoke --output-dir runs/smoke
  harnessrl run stages.rl.steps=40 stages.long_horizon.enabled=false
  harnessrl compile recipe=qwen_coder_7b -o pipeline.yaml
  harnessrl config show recipe=qwen_coder_7b
"""


def _add_overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="Hydra overrides, e.g. stages.cpt.steps=10")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harnessrl",
        description="Train tool-calling coding agents with RL in the production harness.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "run",
        help="run the recipe's DAG locally through kfp's local runner",
        description="Run the recipe's whole chain on this machine with kfp.local (caching on). "
        "Stages whose inputs did not change are served from the cache.",
    )
    _add_overrides(p)
    p.add_argument("--output-dir", type=Path, help="run directory (default: runs/<recipe>-<timestamp>)")
    p.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="continue a killed run: finished stages come from the cache, a killed stage from its last state",
    )
    p.add_argument(
        "--pipeline-root",
        type=Path,
        default=Path("runs/.kfp"),
        help="kfp artifacts and cache, shared by runs (default: %(default)s)",
    )

    p = sub.add_parser("compile", help="write the recipe's DAG as KFP v2 IR YAML")
    _add_overrides(p)
    p.add_argument("-o", "--output", type=Path, default=Path("pipeline.yaml"), help="default: %(default)s")

    p = sub.add_parser("submit", help="compile and submit the DAG to a Kubeflow Pipelines endpoint")
    _add_overrides(p)
    p.add_argument("--host", required=True, help="KFP API endpoint, e.g. https://kfp.example.com")
    p.add_argument("--experiment", help="experiment name (default: harnessrl)")
    p.add_argument("-o", "--output", type=Path, default=Path("pipeline.yaml"), help="where the IR is written")

    p = sub.add_parser("config", help="show, validate or describe the composed config")
    csub = p.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    for name, text in (("show", "print the resolved YAML"), ("validate", "exit 0 if valid, 2 if not")):
        _add_overrides(csub.add_parser(name, help=text, description=text))
    csub.add_parser("schema", help="print the config's JSON Schema")

    p = sub.add_parser("data", help="build the recipe's DVC-tracked data folder")
    dsub = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    pb = dsub.add_parser("build", help="generate data/ deterministically from the recipe's data config")
    _add_overrides(pb)
    pb.add_argument("-o", "--output", type=Path, help="default: the recipe's data.dir")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as e:
        print(f"harnessrl: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _cmd_run(args: argparse.Namespace) -> int:
    from pipelines.local import print_summary, read_run, run_local

    if args.resume:
        if args.overrides or args.output_dir:
            print(
                "harnessrl: error: --resume takes the run's own overrides and directory; give neither", file=sys.stderr
            )
            return EXIT_BAD_INPUT
        try:
            recorded = read_run(args.resume)
        except FileNotFoundError as e:
            print(f"harnessrl: error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        overrides, run_dir = recorded["overrides"], args.resume
        pipeline_root, data_root = Path(recorded["pipeline_root"]), Path(recorded["data_root"])
    else:
        overrides, pipeline_root, data_root = args.overrides, args.pipeline_root, Path.cwd()
    cfg = compose(overrides)  # validates before anything is written
    run_dir = run_dir if args.resume else args.output_dir or Path("runs") / f"{cfg.name}-{datetime.now():%Y%m%d-%H%M%S}"
    t0 = time.time()
    try:
        rows = run_local(cfg, run_dir, pipeline_root, data_root, overrides)
    except RuntimeError as e:  # kfp.local raises when a task fails; its log is above
        print(f"harnessrl: run failed: {e}\n  logs: {run_dir / 'kfp.log'}", file=sys.stderr)
        return 1
    print_summary(rows, time.time() - t0)
    print(f"run directory: {run_dir}")
    return 0


def _cmd_compile(args: argparse.Namespace) -> int:
    from pipelines.remote import compile_pipeline

    cfg = compose(args.overrides)
    t0 = time.time()
    compile_pipeline(cfg, args.output, Path.cwd())
    print(f"wrote {args.output} ({cfg.name}, {len(cfg.enabled_stages())} stages, {time.time() - t0:.2f}s)")
    return 0


def _cmd_submit(args: argparse.Namespace) -> int:
    from pipelines.remote import submit

    cfg = compose(args.overrides)
    run_id, url = submit(cfg, args.host, args.experiment, Path.cwd(), args.output)
    print(f"run id: {run_id}\nurl: {url}")
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    if args.config_command == "schema":
        print(json.dumps(Config.model_json_schema(), indent=2))
        return 0
    cfg = compose(args.overrides)
    if args.config_command == "show":
        print(yaml.safe_dump(cfg.model_dump(), sort_keys=False), end="")
    else:
        print(f"ok: recipe {cfg.name}, stages {' → '.join(cfg.enabled_stages())}")
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    from harnessrl.data.build import build
    from harnessrl.data.md5 import dvc_dir_md5

    cfg = compose(args.overrides)
    out = args.output or Path(cfg.data.dir)
    build(cfg.data, out)
    print(f"built {out}: md5 {dvc_dir_md5(out)}")
    return 0


COMMANDS = {"run": _cmd_run, "compile": _cmd_compile, "submit": _cmd_submit, "config": _cmd_config, "data": _cmd_data}

if __name__ == "__main__":
    sys.exit(main())
