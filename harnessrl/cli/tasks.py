"""`harnessrl tasks build|import|stats|attack|expert` and `harnessrl tools exec`: suites of tasks, and the harness's tools run by hand."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from harnessrl.cli.common import EXIT_BAD_INPUT


def add_parser(sub: argparse._SubParsersAction) -> None:
    from harnessrl.tasks.suites import SUITES

    p = sub.add_parser("tasks", help="build task suites and run the expert on them")
    tsub = p.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    pb = tsub.add_parser(
        "build",
        help="build a suite directory from generated repos or real code, every task validated",
        description="Build a suite: DIR/tasks/{train,heldout}.jsonl (one task per line), DIR/repos/ "
        "(repo snapshots), DIR/suite.json and DIR/mining.json. Tasks come from generated repos, or are mined "
        "from the --source directories. Every task is validated in the sandbox: its check must fail on the "
        "untouched snapshot and pass on the expert's solution; drops are counted by reason (`tasks stats`). "
        "Same seed and code, same bytes. Held-out tasks use repos (for --source: whole sources) that no "
        "train task uses.",
    )
    pb.add_argument("--suite", required=True, choices=list(SUITES), help="which suite")
    pb.add_argument("--seed", type=int, default=0, help="generator seed (default: %(default)s)")
    pb.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="suite directory to write")
    pb.add_argument(
        "--num",
        type=int,
        default=40,
        help="tasks, a quarter held out; with --source, the most per source (default: %(default)s)",
    )
    pb.add_argument(
        "--source",
        type=Path,
        action="append",
        metavar="DIR",
        help="mine the suite from this directory of real code (a repository, a git checkout at HEAD, an "
        "installed package) instead of generated repos; repeat it for several, of which a quarter are held "
        "out whole. --num is then the most tasks per source",
    )
    ps = tsub.add_parser(
        "stats",
        help="tasks per suite, source and split, validation drops and the expert's success",
        description="Read a suite directory (`tasks build`) or a data folder (`data build`) and print, per "
        "suite, source and split, how many tasks it holds; per source and suite, the candidates mined, "
        "the drops by reason and the expert's success at validation.",
    )
    ps.add_argument("suite_dir", type=Path, metavar="DIR", help="a suite directory or data folder")
    pi = tsub.add_parser(
        "import",
        help="build the swe suite from SWE-bench-format rows and local clones",
        description="Import rows in the SWE-bench schema (instance_id, repo, base_commit, problem_statement, "
        "patch, test_patch, FAIL_TO_PASS, PASS_TO_PASS; as SWE-bench, SWE-Gym, SWE-smith and R2E-Gym publish "
        "them) into a suite directory laid out as `tasks build` writes it. Each row's repo is a local clone under "
        "--repos (DIR/owner/name or DIR/name); its base_commit becomes the snapshot. A row is kept only if, in the "
        "sandbox, its check fails on the snapshot and passes after the expert replays the gold patch; dropped rows "
        'are counted per reason in suite.json\'s "dropped". Whole repos are held out (a quarter, or --heldout-repos).',
    )
    pi.add_argument("file", type=Path, metavar="FILE", help="rows: .jsonl, a .json list, or .parquet")
    pi.add_argument("--format", required=True, choices=["swebench"], help="the rows' schema")
    pi.add_argument("--repos", type=Path, required=True, metavar="DIR", help="where the local clones are")
    pi.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="suite directory to write")
    pi.add_argument("--heldout-repos", metavar="A,B", help="hold out these repos (owner/name) instead of a quarter")
    pi.add_argument("--seed", type=int, default=0, help="which quarter of the repos is held out (default: %(default)s)")
    pi.add_argument("--workers", type=int, default=4, help="rows validated at once (default: %(default)s)")
    pa = tsub.add_parser(
        "attack",
        help="try to pass every check without doing the work: a table of what each attack got accepted",
        description="Run scripted adversaries (harnessrl/tasks/attacks.py) on every task of a suite directory or "
        "data folder, each an episode in the sandboxed harness with the task's own tools: do nothing, hedge, "
        "empty the file, forge a test verdict, add a conftest.py, pytest.ini or pyproject.toml, shadow pytest, "
        "stub, empty or break the workspace's tests, rename only the def, silence ruff by comment or config, "
        "delete the flagged lines. Prints accepted/tried per suite and attack; exits 1 when any attack "
        "passed a check, 0 when none did.",
    )
    pa.add_argument("suite_dir", type=Path, metavar="DIR", help="a suite directory or data folder")
    pa.add_argument(
        "--attack", action="append", metavar="NAME", help="only this attack (repeat for several; default: all)"
    )
    pa.add_argument("--split", choices=["train", "heldout", "all"], default="all", help="default: %(default)s")
    pa.add_argument("--workers", type=int, default=4, help="concurrent episodes (default: %(default)s)")
    pa.add_argument("--show", type=int, default=3, metavar="N", help="tasks listed per accepted attack (default: 3)")
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
        description="Read one raw assistant message on stdin, written in tool-call format --format, and "
        "classify it as the harness does (tool_calls, final or malformed). First print one JSON line of "
        'what was parsed: {"format", "kind", "calls": [{"name", "arguments"}], "errors": [...], "classes": '
        "[...]} (the class of each error: unparseable, unclosed, unknown_tool, bad_arguments, ...). Then run "
        "the calls in the sandbox over a COPY of --workspace and print a second JSON line: "
        '{"kind": ..., "errors": [...], "results": [{"name", "ok", "output"}]}. '
        "Exits 0 for every classification; non-zero only when the harness itself fails.",
        epilog='example: echo \'<tool_call>{"name": "list_dir", "arguments": {}}</tool_call>\' | '
        "harnessrl tools exec --workspace .",
    )
    px.add_argument("--workspace", type=Path, required=True, metavar="DIR", help="directory to copy and work in")
    px.add_argument("--tools", help="comma-separated tool names the message may call (default: all)")
    px.add_argument("--user", help="what the simulated user answers to ask_user (default: no user)")
    px.add_argument(
        "--format",
        default="hermes",
        metavar="NAME",
        help="the tool-call format the message is written in: hermes (default), qwen3_coder, llama3_json, mistral",
    )


def cmd_tasks(args: argparse.Namespace) -> int:
    from harnessrl.tasks.expert import expert_trajectories, success_rates
    from harnessrl.tasks.suites import build_suite
    from harnessrl.tasks.task import TaskFileError, load_suite

    try:
        if args.tasks_command == "build":
            t0 = time.time()
            say = lambda line: print(f"tasks: {line} ({time.time() - t0:.0f} s)", flush=True)
            info = build_suite(args.suite, args.output, args.seed, args.num, args.source, say=say)
            counts = ", ".join(f"{n} {s}" for s, n in info["counts"].items())
            dropped = info["dropped"]
            print(f"built {args.output}: {args.suite}, {counts} tasks, {dropped} dropped at validation "
                  f"({time.time() - t0:.1f}s)")  # fmt: skip
            return 0
        if args.tasks_command == "stats":
            from harnessrl.tasks.stats import stats_lines

            for line in stats_lines(args.suite_dir):
                print(line)
            return 0
        if args.tasks_command == "import":
            from harnessrl.tasks.swe import import_swebench

            held = [r.strip() for r in args.heldout_repos.split(",") if r.strip()] if args.heldout_repos else None
            t0 = time.time()
            info = import_swebench(args.file, args.repos, args.output, held, args.seed, args.workers)
            print(f"built {args.output}: swe, {info['num']} tasks ({time.time() - t0:.1f}s)")
            return 0
        splits = ["train", "heldout"] if args.split == "all" else [args.split]
        tasks = [t for s in splits for t in load_suite(args.suite_dir, s)]
        if args.tasks_command == "attack":
            from harnessrl.tasks.attacks import ATTACKS

            unknown = [a for a in args.attack or [] if a not in ATTACKS]
            if unknown:
                raise KeyError(f"--attack: unknown {', '.join(unknown)}; attacks: {', '.join(ATTACKS)}")
    except (TaskFileError, FileNotFoundError, ValueError, KeyError) as e:
        print(f"harnessrl: error: {e.args[0] if isinstance(e, KeyError) else e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.tasks_command == "attack":
        return _attack(args, tasks)
    runs = {"": None}
    if args.context_budget:
        from pydantic import ValidationError

        from harnessrl.config import Budgets, ContextConfig

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


def _attack(args: argparse.Namespace, tasks: list) -> int:
    from harnessrl.tasks.attacks import accepted, run_attacks, table

    t0 = time.time()
    runs = run_attacks(tasks, args.suite_dir, args.attack, workers=args.workers)
    for line in table(runs):
        print(line)
    passed = accepted(runs)
    by_attack: dict[str, list[str]] = {}
    for task_id, names in passed.items():
        for name in names:
            by_attack.setdefault(name, []).append(task_id)
    for name, ids in by_attack.items():
        more = f" and {len(ids) - args.show} more" if len(ids) > args.show else ""
        print(f"{name} passed: {', '.join(ids[: args.show])}{more}")
    print(f"{len(runs)} attack episodes on {len(tasks)} tasks in {time.time() - t0:.1f}s")
    return 1 if passed else 0


def cmd_tools(args: argparse.Namespace) -> int:
    import tempfile

    from harnessrl.config import Budgets
    from harnessrl.harness import formats
    from harnessrl.harness.episode import AssistantTurn, run_episode
    from harnessrl.harness.protocol import parse_turn
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
    try:
        fmt = formats.load(args.format)
    except ValueError as e:
        print(f"harnessrl: error: --format: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    message = sys.stdin.buffer.read().decode("utf-8", "replace")
    parsed = parse_turn(message, tools, Budgets().max_calls_per_turn, fmt)
    calls = [c.model_dump() for c in parsed.calls]
    print(
        json.dumps(
            {
                "format": args.format,
                "kind": parsed.kind,
                "calls": calls,
                "errors": parsed.errors,
                "classes": parsed.classes,
            }
        ),
        flush=True,
    )
    turns = [message]  # one turn: the message; the episode stops after it (max_turns=1)

    def policy(messages: list, tool_specs: list, max_tokens: int) -> AssistantTurn:
        return AssistantTurn(text=turns.pop(0))

    try:
        with tempfile.TemporaryDirectory(prefix="tools-exec-") as tmp:
            ws = create_workspace(args.workspace, Path(tmp) / "ws", method="copy")
            try:
                ctx = ToolContext(ws, Sandbox(ws), ask_user=(lambda q: args.user) if args.user is not None else None)
                traj = run_episode(policy, "(tools exec)", tools, ctx, budgets=Budgets(max_turns=1), fmt=fmt)
            finally:
                remove_workspace(ws)
    except (SandboxUnavailable, OSError) as e:
        print(f"harnessrl: harness failure: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    turn = traj.turns[0]
    results = [{"name": c.name, "ok": not c.error, "output": c.output} for c in turn.calls]
    print(json.dumps({"kind": turn.kind, "errors": turn.errors, "results": results}))
    return 0
