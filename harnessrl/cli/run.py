"""`harnessrl run`, `compile` and `submit`: the recipe's whole DAG, here through kfp.local or on a cluster."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from datetime import datetime
from pathlib import Path

import yaml

from harnessrl.cli.common import EXIT_BAD_INPUT, add_overrides
from harnessrl.cluster.rayjob import groups as rayjob_groups
from harnessrl.config import Config, compose
from harnessrl.rl import placement
from pipelines.routing import data_rayjob, enabled_stages, runs_as_job, stage_slice


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run the recipe's DAG locally through kfp's local runner",
        description="Run the recipe's whole chain on this machine with kfp.local (caching on). "
        "Stages whose inputs did not change are served from the cache.",
    )
    add_overrides(p)
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
        "config's pointer (the root's data.dvc for the default recipe, else data/<name>-<config hash>.dvc) "
        "names from store.data_remote; without a pointer "
        "it builds the data on the cluster and pushes it (`harnessrl data build` and `data push` do it "
        "from here instead)."
    )
    for name, text in (
        ("compile", "write the recipe's DAG as KFP v2 IR YAML"),
        ("submit", "compile and submit the DAG to a Kubeflow Pipelines endpoint"),
    ):
        p = sub.add_parser(name, help=text, description=f"{text[0].upper()}{text[1:]}. {cluster_note}")
        add_overrides(p)
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


def cmd_run(args: argparse.Namespace) -> int:
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
    placement.preflight(cfg)  # a placement this machine's Ray never offers would leave actors pending
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


def cmd_compile(args: argparse.Namespace) -> int:
    from pipelines.remote import compile_pipeline

    cfg = _cluster_config(args)
    t0 = time.time()
    source = compile_pipeline(cfg, args.output, Path.cwd())
    print(f"wrote {args.output} ({cfg.name}, {len(enabled_stages(cfg))} stages, {time.time() - t0:.2f}s)")
    if source.md5:
        print(f"data: version {source.md5}, pulled from {source.remote} by the data step")
    else:
        job = data_rayjob(cfg)
        how = f" (as a RayJob: {rayjob_groups(job)})" if job else ""
        print(f"data: no pointer for this data config; the data step will build it and push it to {source.remote}{how}")
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    from pipelines.remote import compile_pipeline, submit

    cfg = _cluster_config(args)
    if args.dry_run:
        from harnessrl.cluster import rayjob, trainjob

        source = compile_pipeline(cfg, args.output, Path.cwd())
        print(f"# would submit {args.output} ({cfg.name}); the stages would create:")
        if not source.md5 and (data_job := data_rayjob(cfg)):  # the data step builds the data
            print("---")
            print(yaml.safe_dump(rayjob.example("data", {"rayjob": data_job.model_dump()}), sort_keys=False), end="")
        for stage in enabled_stages(cfg):
            if runs_as_job(cfg, stage):
                job = trainjob if stage in ("cpt", "sft") else rayjob
                print("---")
                print(yaml.safe_dump(job.example(stage, stage_slice(cfg, stage)), sort_keys=False), end="")
        return 0
    if not args.host:
        print("harnessrl: error: --host: required to submit (or --dry-run to submit nothing)", file=sys.stderr)
        return EXIT_BAD_INPUT
    run_id, url = submit(cfg, args.host, args.experiment, Path.cwd(), args.output)
    print(f"run id: {run_id}\nurl: {url}")
    return 0
