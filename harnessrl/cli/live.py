"""`harnessrl live`: real-time RL next to `harnessrl serve`: cycles, feedback ingest, simulated users."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from harnessrl.cli.common import EXIT_BAD_INPUT, add_overrides

DESCRIPTION = """\
Each cycle collects the sessions `harnessrl serve` logged in LIVE_DIR since the last one, joined with
their feedback; trains stages.rl's update on them on-policy (live.off_policy says what happens to
sessions of an older checkpoint; a session without behaviour logprobs is refused); gates the
candidate against the served checkpoint on stages.eval's held-out suites (live.gates); and on a pass
promotes it (LIVE_DIR/served.json, which serve hot-swaps to). Rows go to LIVE_DIR/cycles.jsonl,
incidents (hack alarms, failed gates) to LIVE_DIR/incidents.jsonl.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("live", help="real-time RL: cycles over served sessions, feedback ingest, simulated users",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    lsub = p.add_subparsers(dest="live_command", required=True, metavar="ACTION")

    def live_dir(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--live-dir", type=Path, default=Path("runs/live"), help="the live folder (default: %(default)s)"
        )

    pc = lsub.add_parser("cycle", help="run one cycle now", description="Collect, train, gate and promote once.")
    add_overrides(pc)
    live_dir(pc)
    pr = lsub.add_parser("run", help="run cycles every live.every_s seconds, next to `harnessrl serve`",
                         description="Cycles in a loop; a cycle with too few ready sessions waits for the next.")  # fmt: skip
    add_overrides(pr)
    live_dir(pr)
    pr.add_argument("--cycles", type=int, help="stop after this many cycles that trained a candidate (default: never)")

    pi = lsub.add_parser(
        "ingest",
        help="store feedback events from a JSONL file",
        description="Validate every line of FILE as a feedback event (harnessrl/live/feedback.py) and store "
        "them in LIVE_DIR/feedback.jsonl. A bad line stores nothing and names the line and field; "
        "duplicates (same event_id, or the same content) are counted and stored once.",
    )
    pi.add_argument("file", type=Path, metavar="FILE")
    live_dir(pi)

    ps = lsub.add_parser("status", help="what is served, and each cycle's figures")
    live_dir(ps)
    for name, text in (
        ("compile", "write the live cycle's pipeline as KFP v2 IR YAML"),
        ("schedule", "compile it and create a KFP recurring run every live.recurring_hours"),
    ):
        pk = lsub.add_parser(name, help=text, description=f"{text[0].upper()}{text[1:]}. The live folder must "
                             "be on infra.pvc, where `harnessrl serve` writes it.")  # fmt: skip
        add_overrides(pk)
        pk.add_argument("--live-dir", required=True, help="the live folder on the cluster, e.g. /models/live/qwen")
        pk.add_argument("-o", "--output", type=Path, default=Path("live-pipeline.yaml"), help="default: %(default)s")
        if name == "schedule":
            pk.add_argument("--host", required=True, help="KFP API endpoint, e.g. https://kfp.example.com")
            pk.add_argument("--experiment", help="experiment name (default: harnessrl)")
    pp = lsub.add_parser("report", help="redraw LIVE_DIR/report (live.md, live.html, kept_rate.png)",
                         description="The live report: each cycle's sessions, kept and dissatisfied rates, latency, "
                         "gate, promotion and incidents, and the kept rate over cycles. Cycles rewrite it.")  # fmt: skip
    live_dir(pp)

    pm = lsub.add_parser(
        "simulate",
        help="simulated users: work tasks with a served model over HTTP, then send feedback",
        description="Draw tasks from the recipe's training prompts (stages.rl.mix), work each with the "
        "model at --endpoint through `harnessrl agent --endpoint`'s client in the served checkpoint's "
        "harness, and post each session's feedback (harnessrl/live/simulate.py says what each behaviour sends). "
        "A server with an API key gets $HARNESSRL_API_KEY.",
    )
    add_overrides(pm)
    live_dir(pm)
    pm.add_argument("--endpoint", required=True, help="the server, e.g. http://127.0.0.1:8000/v1")
    pm.add_argument("--model", default="harnessrl", help="the served model name (default: %(default)s)")
    pm.add_argument("--sessions", type=int, default=32, help="default: %(default)s")
    pm.add_argument(
        "--behaviour", default="honest", choices=["honest", "rewards_broken", "rewards_clarify", "sabotage"]
    )
    pm.add_argument("--workers", type=int, default=4, help="sessions at a time (default: %(default)s)")
    pm.add_argument("--seed", type=int, default=0, help="which tasks, and the sampling seeds (default: %(default)s)")


def _data_dir(cfg) -> Path:
    from harnessrl.data.build import data_folder

    path = data_folder(cfg.data)
    if not (path / "heldout.jsonl").is_file():
        raise FileNotFoundError(f"{path}: the recipe's data folder is not built; run `harnessrl data build` first")
    return path


def cmd_live(args: argparse.Namespace) -> int:
    from harnessrl.config import compose

    try:
        if args.live_command == "ingest":
            return _ingest(args)
        if args.live_command == "status":
            return _status(args)
        if args.live_command == "report":
            from harnessrl.report.live import write_live_report

            print(f"wrote {write_live_report(args.live_dir) / 'live.md'}")
            return 0
        cfg = compose(args.overrides)
        if args.live_command in ("compile", "schedule"):
            return _compile(args, cfg)
        if args.live_command == "simulate":
            return _simulate(args, cfg)
        return _cycles(args, cfg, _data_dir(cfg))
    except (ValueError, FileNotFoundError) as e:
        print(f"harnessrl: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _cycles(args: argparse.Namespace, cfg, data_dir: Path) -> int:
    from harnessrl.live.cycle import run_cycle
    from harnessrl.report.live import write_live_report

    trained = 0
    while True:
        row = run_cycle(cfg, args.live_dir, data_dir)
        print(_row_line(row), flush=True)
        if row["result"] != "waiting":
            write_live_report(args.live_dir)
        trained += row["result"] in ("promoted", "rejected")
        if args.live_command == "cycle" or (args.cycles is not None and trained >= args.cycles):
            return 0
        time.sleep(cfg.live.every_s)


def _compile(args: argparse.Namespace, cfg) -> int:
    from pipelines.remote import compile_live, schedule_live

    if args.live_command == "compile":
        compile_live(cfg, args.output, Path.cwd(), args.live_dir)
        print(f"wrote {args.output} (one live cycle over {args.live_dir}; schedule it every "
              f"{cfg.live.recurring_hours} h with `harnessrl live schedule`)")  # fmt: skip
        return 0
    job = schedule_live(cfg, args.host, args.experiment, Path.cwd(), args.output, args.live_dir)
    print(f"recurring run {job}: a live cycle every {cfg.live.recurring_hours} h over {args.live_dir}")
    return 0


def _row_line(row: dict) -> str:
    if row["result"] == "waiting":
        why = row.get("reason") or f"{row['sessions']} sessions ready, {row['waiting']} awaiting feedback"
        return f"[live] waiting: {why}"
    p50 = "-" if row["latency_p50_s"] is None else f"{row['latency_p50_s']:.2f}"
    p95 = "-" if row["latency_p95_s"] is None else f"{row['latency_p95_s']:.2f}"
    return (f"[live] cycle {row['cycle']}: {row['result']}: {row['sessions']} sessions, kept {row['kept_rate']:.3f}, "
            f"dissatisfied {row['dissatisfied_rate']:.3f}, latency p50 {p50} s p95 {p95} s, "
            f"incidents {row.get('incidents') or '-'}")  # fmt: skip


def _ingest(args: argparse.Namespace) -> int:
    from harnessrl.live.feedback import FeedbackStore, read_events_file
    from harnessrl.serve.server import FEEDBACK, SESSIONS
    from harnessrl.serve.session_log import read_log

    if not args.file.is_file():
        raise FileNotFoundError(f"{args.file}: no such file")
    events = read_events_file(args.file)  # all validated before any is stored
    store = FeedbackStore(args.live_dir / FEEDBACK)
    counts = store.add(events)
    store.close()
    known = {r.get("session_id") for r in read_log(args.live_dir / SESSIONS)[0]}
    counts["unknown_session"] = sum(e["session_id"] not in known for e in events)
    print(json.dumps(counts))
    return 0


def _status(args: argparse.Namespace) -> int:
    from harnessrl.live.cycle import CYCLES
    from harnessrl.serve.server import served_checkpoint
    from harnessrl.serve.session_log import read_log

    print(f"served: {served_checkpoint(args.live_dir) or 'nothing yet'}")
    for row in read_log(args.live_dir / CYCLES)[0]:
        print(_row_line(row))
    return 0


def _simulate(args: argparse.Namespace, cfg) -> int:
    import random
    import uuid

    from harnessrl.agent import production_harness
    from harnessrl.data.build import read_jsonl
    from harnessrl.harness.spec import load_harness
    from harnessrl.live.simulate import simulate
    from harnessrl.serve.server import served_checkpoint
    from harnessrl.tasks.task import Task

    if args.sessions <= 0 or args.workers <= 0:
        raise ValueError("--sessions and --workers must be positive")
    data_dir = _data_dir(cfg)
    served = served_checkpoint(args.live_dir)
    harness = production_harness(load_harness(served) if served else None)
    tasks = [Task.model_validate(r["task"]) for r in read_jsonl(data_dir / "prompts.jsonl")]
    tasks = [t for t in tasks if t.suite in cfg.stages.rl.mix]
    if not tasks:
        raise ValueError(f"stages.rl.mix: no prompts of {list(cfg.stages.rl.mix)} in {data_dir / 'prompts.jsonl'}")
    drawn = random.Random(args.seed).choices(tasks, k=args.sessions)
    rows = simulate(args.endpoint, args.model, drawn, data_dir, harness.budgets, args.behaviour,
                    cfg.stages.rl.temperature, f"sim-{args.behaviour}-{uuid.uuid4().hex[:8]}", args.workers, args.seed,
                    os.environ.get("HARNESSRL_API_KEY"))  # fmt: skip
    solved = sum(r["success"] for r in rows) / len(rows)
    print(
        f"[simulate] {len(rows)} sessions ({args.behaviour}): checker passed {solved:.3f}, "
        f"malformed turns {sum(r['malformed'] for r in rows)}, questions {sum(r['asked'] for r in rows)}"
    )
    return 0
