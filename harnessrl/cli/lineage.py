"""`harnessrl lineage show|verify|diff|push`: checkpoints' lineage, local or in an S3 store."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harnessrl.cli.common import EXIT_BAD_INPUT


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "lineage",
        help="show, verify, diff or push checkpoints' lineage",
        description="CKPT is a checkpoint folder or s3://bucket/prefix/<id> (downloaded through the store, "
        "checksums verified). Exit 0: ok; 1: verification failed; 2: bad input.",
    )
    p.add_argument("--endpoint-url", help="S3-compatible endpoint for s3:// checkpoints")
    lsub = p.add_subparsers(dest="lineage_command", required=True, metavar="ACTION")
    lsub.add_parser("show", help="print the chain back to the base model as a tree").add_argument("ckpt")
    lsub.add_parser("verify", help="recompute every hash along the chain; exit 1 at the first mismatch").add_argument(
        "ckpt"
    )
    pd = lsub.add_parser("diff", help="what differs between two checkpoints' origins")
    pd.add_argument("a")
    pd.add_argument("b")
    pp = lsub.add_parser("push", help="upload a checkpoint and its ancestors to a store, by id")
    pp.add_argument("ckpt")
    pp.add_argument("dest", help="a local directory or s3://bucket/prefix")


def cmd_lineage(args: argparse.Namespace) -> int:
    import tempfile

    from botocore.exceptions import BotoCoreError, ClientError

    from harnessrl.config import StoreConfig
    from harnessrl.lineage import remote, show, verify
    from harnessrl.store import ChecksumError

    cfg = StoreConfig(endpoint_url=args.endpoint_url)
    with tempfile.TemporaryDirectory(prefix="harnessrl-lineage-") as tmp:
        try:
            if args.lineage_command == "push":
                for uri, uploaded in remote.push_chain(remote.local_copy(args.ckpt, Path(tmp), cfg), args.dest, cfg):
                    print(f"{'uploaded' if uploaded else 'present '}  {uri}")
                return 0
            names = [args.a, args.b] if args.lineage_command == "diff" else [args.ckpt]
            whole = args.lineage_command == "verify"
            paths = [remote.local_copy(n, Path(tmp) / str(i), cfg, weights=whole) for i, n in enumerate(names)]
            if args.lineage_command == "show":
                print(show.render_chain(paths[0]))
            elif args.lineage_command == "diff":
                print("\n".join(show.diff(*paths)) or "same origin: no differences")
            else:
                failed = verify.report(verify.verify(paths[0]), print)
                if failed:
                    print(f"harnessrl: verify failed: {failed}", file=sys.stderr)
                    return 1
            return 0
        except ChecksumError as e:  # a download that does not match its stored sha256
            print(f"harnessrl: verify failed: {e}", file=sys.stderr)
            return 1
        except (FileNotFoundError, ValueError, BotoCoreError, ClientError) as e:
            print(f"harnessrl: error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
