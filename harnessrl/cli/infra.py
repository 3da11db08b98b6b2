"""`harnessrl infra import`: what Terraform built, turned into harnessrl config groups."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harnessrl.cli.common import EXIT_BAD_INPUT
from harnessrl.config import CONF_DIR


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("infra", help="turn what Terraform built into harnessrl config groups")
    isub = p.add_subparsers(dest="infra_command", required=True, metavar="ACTION")
    pi = isub.add_parser(
        "import",
        help="write conf/infra/<name>.yaml and conf/store/<name>.yaml from `terraform output -json`",
        description="Lay the cluster's own keys (bucket, pipeline root, PVC, secret, node pools) from the "
        "output harnessrl_config over a base infra config, validate both groups with harnessrl's config "
        "models, and write them. Then: harnessrl submit recipe=... infra=<name> store=<name>. Exit 2: bad input.",
    )
    pi.add_argument("outputs", help="the JSON of `terraform -chdir=infra/terraform/aws output -json`; - for stdin")
    pi.add_argument("--name", help="the groups' name (default: the cluster_name output)")
    pi.add_argument("--base", default="gpu_cluster", help="the infra config to lay them over (default: %(default)s)")
    pi.add_argument("--conf-dir", type=Path, default=CONF_DIR, help="the Hydra tree to write into (default: conf/)")
    pi.add_argument("--force", action="store_true", help="replace files that exist with other content")


def cmd_infra(args: argparse.Namespace) -> int:
    from harnessrl.cluster import infra_import

    try:
        text = sys.stdin.read() if args.outputs == "-" else Path(args.outputs).read_text()
        outputs = json.loads(text)
        if not isinstance(outputs, dict):
            raise infra_import.InfraImportError(f"{args.outputs}: not the JSON object `terraform output -json` prints")
        name = args.name or infra_import.output_value(outputs, "cluster_name")
        groups = infra_import.build(outputs, name, args.conf_dir, args.base)
        source = "stdin" if args.outputs == "-" else Path(args.outputs).name
        written = infra_import.write(groups, name, args.conf_dir, args.force, f"terraform outputs ({source})")
    except (OSError, json.JSONDecodeError, infra_import.InfraImportError) as e:
        print(f"harnessrl: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for path in written:
        print(f"wrote {path}")
    print(f"use it: harnessrl submit recipe=qwen_coder_7b infra={name} store={name} --host ...")
    return 0
