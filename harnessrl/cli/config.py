"""`harnessrl config show|validate|schema`: the composed config, printed, checked or described."""

from __future__ import annotations

import argparse
import json

import yaml

from harnessrl.cli.common import add_overrides
from harnessrl.config import compose
from harnessrl.config.schema import json_schema
from pipelines.routing import enabled_stages


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="show, validate or describe the composed config")
    csub = p.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    for name, text in (
        ("show", "print the resolved YAML"),
        ("validate", "exit 0 if valid, 2 if not"),
        ("schema", "print the config's JSON Schema, each default the value the composed recipe gives"),
    ):
        add_overrides(csub.add_parser(name, help=text, description=text))


def cmd_config(args: argparse.Namespace) -> int:
    cfg = compose(args.overrides)
    if args.config_command == "schema":
        print(json.dumps(json_schema(cfg), indent=2))
    elif args.config_command == "show":
        print(yaml.safe_dump(cfg.model_dump(), sort_keys=False), end="")
    else:
        print(f"ok: recipe {cfg.name}, stages {' → '.join(enabled_stages(cfg))}")
    return 0
