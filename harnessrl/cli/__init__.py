"""`harnessrl ...`: parse arguments, call the library, print. No logic of its own.

Every command that takes a recipe takes Hydra overrides as plain arguments, e.g.
    harnessrl run recipe=tiny stages.cpt.steps=50 stages.rl.enabled=false
A bad override exits 2 with one line naming the field, before anything is written.

Each command group is a module of this package, its parser (`add_parser`) next to its handler
(`cmd_<command>`); this module assembles the parsers and dispatches through COMMANDS.
"""

from __future__ import annotations

import argparse
import sys

from harnessrl.cli import agent, config, data, eval, infra, lineage, live, model, report, rl, run, serve, tasks
from harnessrl.cli.common import EXIT_BAD_INPUT
from harnessrl.config import ConfigError

__all__ = ["COMMANDS", "EXIT_BAD_INPUT", "build_parser", "main"]

EPILOG = """\
overrides are Hydra syntax: key=value to change, +key=value to add, ~key to delete, group=option
to pick a config group option. Examples:
  harnessrl run                                  # the default recipe (tiny) on this machine
  harnessrl run recipe=tiny_smoke --output-dir runs/smoke
  harnessrl run stages.rl.steps=40 stages.long_horizon.enabled=false
  harnessrl compile recipe=qwen_coder_7b -o pipeline.yaml
  harnessrl config show recipe=qwen_coder_7b
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harnessrl",
        description="Train tool-calling coding agents with RL in the production harness.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # In this order: `harnessrl --help` lists the commands as they are added.
    run.add_parser(sub)  # run, compile, submit
    config.add_parser(sub)
    data.add_parser(sub)
    tasks.add_parser(sub)  # tasks, tools
    lineage.add_parser(sub)
    eval.add_parser(sub)
    rl.add_parser(sub)
    report.add_parser(sub)
    infra.add_parser(sub)
    model.add_parser(sub)
    agent.add_parser(sub)
    serve.add_parser(sub)
    live.add_parser(sub)
    return parser


COMMANDS = {
    "run": run.cmd_run,
    "compile": run.cmd_compile,
    "submit": run.cmd_submit,
    "config": config.cmd_config,
    "data": data.cmd_data,
    "tasks": tasks.cmd_tasks,
    "tools": tasks.cmd_tools,
    "lineage": lineage.cmd_lineage,
    "eval": eval.cmd_eval,
    "rl": rl.cmd_rl,
    "report": report.cmd_report,
    "agent": agent.cmd_agent,
    "infra": infra.cmd_infra,
    "model": model.cmd_model,
    "serve": serve.cmd_serve,
    "live": live.cmd_live,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "recipe", None):  # --recipe NAME is the override recipe=NAME, taking the same place
        args.overrides = [f"recipe={args.recipe}", *args.overrides]
    try:
        return COMMANDS[args.command](args)
    except ConfigError as e:
        print(f"harnessrl: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
