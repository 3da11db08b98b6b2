"""`harnessrl report`: a run's eval report, regenerated from its report.json."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harnessrl.cli.common import EXIT_BAD_INPUT


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="regenerate a run's eval report (report.md, report.html, plots) from its report.json",
        description="Read RUN_DIR/checkpoints/eval/report.json and episodes.jsonl (or, when a gate failed the "
        "eval stage, the report it kept under RUN_DIR/state) and write the report into RUN_DIR/report/.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory of `harnessrl run`")
    p.add_argument("-o", "--output", type=Path, metavar="OUT", help="default: RUN_DIR/report")


def cmd_report(args: argparse.Namespace) -> int:
    from harnessrl.report.write import regenerate

    if not args.run_dir.is_dir():
        print(f"harnessrl: error: {args.run_dir}: not a directory", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        out = regenerate(args.run_dir, args.output)
    except (FileNotFoundError, ValueError, KeyError) as e:
        print(f"harnessrl: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {out / 'report.html'} and {out / 'report.md'}")
    return 0
