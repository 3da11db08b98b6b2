"""`harnessrl data build|push|pull`: the recipe's DVC-tracked data folder and its remote."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harnessrl.cli.common import EXIT_BAD_INPUT, add_overrides
from harnessrl.config import Config, compose


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "data",
        help="build, push or pull the recipe's DVC-tracked data folder",
        description="Each data config has its own folder, data/<name>-<config hash>, and DVC pointer, "
        "data/<name>-<config hash>.dvc (git tracks the pointer). Recipes never share or overwrite one.",
    )
    dsub = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    text = "generate the data config's folder deterministically, with progress"
    pb = dsub.add_parser("build", help=text, description=f"{text[0].upper()}{text[1:]}; e.g. --recipe qwen_coder_7b.")
    add_overrides(pb)
    pb.add_argument("-o", "--output", type=Path, help="default: data.dir/<name>-<config hash>")
    pb.add_argument("--push", action="store_true", help="then push it, as `harnessrl data push` does")
    pb.add_argument(
        "--processes",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="real sources mined at once, each in its own process (default: the CPU count, %(default)s)",
    )
    pb.add_argument(
        "--ray",
        action="store_true",
        help="mine real sources as Ray tasks instead: on the cluster at RAY_ADDRESS (every node must mount "
        "the data folder's volume), else on a Ray started here",
    )
    _add_remote_args(pb)

    for name, text in (
        ("push", "dvc add the data config's folder (writing its .dvc pointer) and push it to the remote"),
        ("pull", "pull the data config's folder from the remote, as its .dvc pointer names it"),
    ):
        pd = dsub.add_parser(name, help=text, description=f"{text} (store.data_remote: a directory or s3://...)")
        add_overrides(pd)
        _add_remote_args(pd)


def _add_remote_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--remote", help="override store.data_remote: a local directory or s3://bucket/prefix")
    p.add_argument("--endpoint-url", help="override store.endpoint_url (S3-compatible server)")
    p.add_argument("--repo", type=Path, default=Path("."), help="the git+DVC repo root (default: .)")


def cmd_data(args: argparse.Namespace) -> int:
    from harnessrl.data.build import build, data_folder
    from harnessrl.data.md5 import dvc_dir_md5

    cfg = compose(args.overrides)
    if args.data_command in ("push", "pull"):
        return _cmd_data_remote(args, cfg)
    if args.push and args.output:
        print("harnessrl: error: --push pushes the data config's own folder; drop -o", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = args.output or data_folder(cfg.data, args.repo)
    store = cfg.store.model_copy(update={"endpoint_url": args.endpoint_url or cfg.store.endpoint_url})
    if args.processes < 1:
        print(f"harnessrl: error: --processes must be at least 1, got {args.processes}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:  # the store reaches data.corpus files and source archives on s3://
        build(cfg.data, out, progress=True, store=store, processes=args.processes, use_ray=args.ray)
    except (ValueError, FileNotFoundError) as e:  # a source, corpus file or task file that cannot be read
        print(f"harnessrl: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"built {out}: md5 {dvc_dir_md5(out)}")
    return _cmd_data_remote(args, cfg) if args.push else 0


def _cmd_data_remote(args: argparse.Namespace, cfg: Config) -> int:
    from harnessrl.data import remote
    from harnessrl.data.build import data_folder

    store = cfg.store.model_copy(update={"endpoint_url": args.endpoint_url or cfg.store.endpoint_url})
    url = args.remote or store.data_remote
    folder = data_folder(cfg.data, args.repo)
    try:
        if args.data_command in ("push", "build"):
            # The default recipe's data is pointed at by the repo root's data.dvc; other recipes' by their own.
            default = folder.resolve() == data_folder(compose([]).data, args.repo).resolve()
            r = remote.push(args.repo, folder, url, store, at_root=default)
            print(f"pushed {folder} (md5 {r['md5']}, {r['pushed']} new objects) to {r['remote']}")
            print(f"commit {remote.dvc_file(folder, args.repo.resolve())}: compile and submit take the data "
                  "version from it")  # fmt: skip
        else:
            r = remote.pull(args.repo, folder, url, store)
            print(f"pulled {folder} (md5 {r['md5']} verified, {r['fetched']} fetched) from {r['remote']}")
    except (FileNotFoundError, ValueError) as e:
        print(f"harnessrl: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0
