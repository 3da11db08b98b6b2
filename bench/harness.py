"""Harness performance claims, side by side:

1. workspace creation: hardlink vs copy, for repos of 100 and 2000 files;
2. per-command overhead: bubblewrap sandbox vs a bare subprocess;
3. parse_turn throughput on valid and malformed turns;
4. BM25 search: first query (index build) and later queries;
5. expert episodes/s per suite (sandboxed tools and checks), one worker vs four;
6. concurrent episodes: N episodes at once behind a slow policy (as with a model), up to the most that
   all finish correctly in about the time of one.

Run: PYTHONPATH=. python bench/harness.py  (about 40 s; at most 4 busy threads, except the short
concurrency sweep, whose threads mostly sleep)
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from harnessrl.config import Budgets
from harnessrl.harness import sandbox as sb
from harnessrl.harness.episode import run_tasks
from harnessrl.harness.protocol import parse_turn, render_calls
from harnessrl.harness.sandbox import Sandbox, create_workspace, remove_workspace
from harnessrl.harness.tools import ALL_TOOLS
from harnessrl.harness.tools.search import BM25Index
from harnessrl.tasks.expert import Expert, expert_trajectories, success_rates
from harnessrl.tasks.suites import build_suite
from harnessrl.tasks.task import load_suite


def best_ms(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1000


def make_repo(root: Path, n_files: int) -> Path:
    # 50 files per package, ~4 KB each: a mid-sized Python project.
    for i in range(n_files):
        d = root / f"pkg{i // 50}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i}.py").write_text(
            "".join(f"def f{i}_{j}(x):\n    return x * {j}  # helper\n\n" for j in range(100))
        )
    return root


def bench_workspaces(tmp: Path) -> None:
    print("workspace creation (best of 5)")
    for n in (100, 2000):
        snap = make_repo(tmp / f"snap{n}", n)
        row = {}
        for method in ("hardlink", "copy"):
            times = []  # creation only; removal is not timed
            for k in range(5):
                dest = tmp / f"ws-{n}-{method}-{k}"
                t = time.perf_counter()
                create_workspace(snap, dest, method=method)
                times.append(time.perf_counter() - t)
                remove_workspace(dest)
            row[method] = min(times) * 1000
        plain = best_ms(lambda n=n, snap=snap: shutil.rmtree(shutil.copytree(snap, tmp / f"ct{n}")))
        print(
            f"  {n:>5} files: hardlink {row['hardlink']:7.1f} ms | copy {row['copy']:7.1f} ms | "
            f"shutil.copytree+rmtree {plain:7.1f} ms | copy/hardlink {row['copy'] / row['hardlink']:5.1f}x"
        )


def bench_sandbox(tmp: Path) -> None:
    print("per-command overhead (`true`, best of 10)")
    ws = create_workspace(make_repo(tmp / "small", 10), tmp / "ws-cmd")
    bare = best_ms(lambda: subprocess.run(["/bin/bash", "-c", "true"], check=False), 10)
    line = f"  bare bash {bare:6.1f} ms"
    if sb._bwrap_path() and sb._bwrap_works():
        box = Sandbox(ws)
        boxed = best_ms(lambda: box.run("true"), 10)
        py = best_ms(lambda: box.run("python -c pass"), 5)
        line += f" | bwrap sandbox {boxed:6.1f} ms ({boxed / bare:4.1f}x)"
        line += f" | sandboxed `python -c pass` {py:6.1f} ms"
    else:
        line += " | bwrap unavailable"
    fallback = Sandbox(ws, allow_unsandboxed=True)
    fallback.unsandboxed = True  # force the fallback path even where bwrap works, to compare
    line += f" | rlimit-only fallback {best_ms(lambda: fallback.run('true'), 10):6.1f} ms"
    print(line)


def bench_parser() -> None:
    turns = {
        "valid 3 calls": render_calls([("read_file", {"path": "a.py"}), ("grep", {"pattern": "x"}), ("list_dir", {})]),
        "final text": "The function returns the sum of its arguments. " * 5,
        "malformed": '<tool_call>{"name": "read_file", "arguments": {"path": 1}}</tool_call> trailing',
    }
    n = 5000
    parts = []
    for name, text in turns.items():
        t = time.perf_counter()
        for _ in range(n):
            parse_turn(text, ALL_TOOLS)
        parts.append(f"{name} {(time.perf_counter() - t) / n * 1e6:6.1f} us")
    print("parse_turn per turn: " + " | ".join(parts))


def bench_search(tmp: Path) -> None:
    repo = make_repo(tmp / "search", 500)
    index = BM25Index(repo)
    t = time.perf_counter()
    index.search("f123_7 helper", k=5)
    first = (time.perf_counter() - t) * 1000
    again = best_ms(lambda: index.search("return x helper", k=5), 3)
    chunks = sum(len(cs) for _, cs in index._files.values())
    print(
        f"BM25 search over 500 files ({chunks} chunks): first query (builds index) {first:6.0f} ms | "
        f"later queries {again:6.1f} ms"
    )


def bench_expert(tmp: Path) -> None:
    print("expert episodes (sandboxed tools and checks; all tasks of a suite)")
    for suite, num in (("lookup", 40), ("edit", 12), ("bugfix", 8), ("long_horizon", 8)):
        d = tmp / f"suite-{suite}"
        t = time.perf_counter()
        build_suite(suite, d, seed=0, num=num)
        built = time.perf_counter() - t
        tasks = load_suite(d, "train") + load_suite(d, "heldout")
        row = []
        for workers in (1, 4):
            t = time.perf_counter()
            trajs = expert_trajectories(tasks, d, workers=workers)
            row.append((len(tasks) / (time.perf_counter() - t), success_rates(trajs)[suite]))
        print(
            f"  {suite:<12} build {built:5.1f} s for {len(tasks):>2} tasks | 1 worker {row[0][0]:6.1f} ep/s | "
            f"4 workers {row[1][0]:6.1f} ep/s ({row[1][0] / row[0][0]:3.1f}x) | success {row[1][1]:.2f}"
        )


class SlowExpert(Expert):
    """The expert behind a policy that takes `delay_s` per turn, as a model's generation does."""

    delay_s = 0.5

    def __call__(self, messages, tools, max_tokens):  # type: ignore[no-untyped-def]
        time.sleep(self.delay_s)
        return super().__call__(messages, tools, max_tokens)


def bench_call_overhead(tmp: Path) -> None:
    """What the harness adds per tool call beyond the tool's own work: parse, validate, dispatch,
    time and record. The tool here does nothing, so everything measured is overhead."""
    from pydantic import BaseModel, ConfigDict

    from harnessrl.config import Budgets
    from harnessrl.harness.episode import AssistantTurn, run_episode
    from harnessrl.harness.tools import Tool, ToolContext

    class NoArgs(BaseModel):
        model_config = ConfigDict(extra="forbid")

    noop = Tool("noop", "does nothing", NoArgs, lambda ctx, args: "ok")
    turns, calls_per_turn = 200, 4
    reply = AssistantTurn(text=render_calls([("noop", {})] * calls_per_turn))
    final = AssistantTurn(text="done")

    def policy(messages, tools, max_tokens):  # type: ignore[no-untyped-def]
        return final if len(messages) > 2 * turns else reply

    ws = tmp / "noop-ws"
    ws.mkdir()
    budgets = Budgets(max_turns=turns + 1, max_tokens=10**9, max_calls_per_turn=calls_per_turn)
    for parallel in (1, calls_per_turn):
        b = budgets.model_copy(update={"max_parallel": parallel})
        t = time.perf_counter()
        traj = run_episode(policy, "go", {"noop": noop}, ToolContext(workspace=ws), budgets=b)
        per_call = (time.perf_counter() - t) / traj.counts.tool_calls
        print(
            f"  harness overhead per call ({parallel} thread(s), {traj.counts.tool_calls} calls): "
            f"{per_call * 1e3:.3f} ms   target <= 1 ms"
        )


def bench_concurrency(tmp: Path) -> None:
    d = tmp / "suite-lookup"
    tasks = load_suite(d, "train") + load_suite(d, "heldout")
    print(f"concurrent episodes (lookup, policy {SlowExpert.delay_s}s/turn, 2 turns, sandboxed grep; ideal ~1 s)")
    best = 0
    for n in (1, 64, 256, 512):
        batch = [tasks[i % len(tasks)] for i in range(n)]
        t = time.perf_counter()
        trajs = run_tasks(batch, d, SlowExpert, Budgets(), workers=n)
        wall = time.perf_counter() - t
        ok = all(tr.outcome.success for tr in trajs)
        best = n if ok else best
        print(f"  {n:>3} at once: wall {wall:5.2f} s | {n / wall:6.1f} episodes/s | all succeeded: {ok}")
    print(f"  most concurrent episodes tried, all without error: {best}   target >= 500")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bench_workspaces(tmp)
        bench_sandbox(tmp)
        bench_parser()
        bench_call_overhead(tmp)
        bench_search(tmp)
        bench_expert(tmp)
        bench_concurrency(tmp)


if __name__ == "__main__":
    main()
