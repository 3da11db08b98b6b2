"""Mining real sources: validated tasks per minute on this machine, the share of it spent in the
sandbox, and what each suite yields.

    python bench/mining.py [--sources stdlib:email stdlib:calendar stdlib:statistics] [--per-suite 60]
                           [--processes 1 2] [--workers 4]

Mines every suite from each source with the data build's own `mine_sources` (copy, candidates,
validation in the sandbox), the last source held out, once per --processes value, and prints:

  - per run: wall seconds, validated tasks, tasks per minute, and sandbox seconds over wall seconds
    (every sandboxed command's wall time, summed over the threads that ran them: how many sandboxes
    were busy on average; measured in one process only, so shown for --processes 1);
  - the ratio of each run's tasks per minute to the first run's, measured in this one invocation;
  - per suite (from the first run): candidates, kept, the expert's success and the drops by reason;
  - the held-out check: every kept held-out task's check run again on its untouched snapshot, which
    must fail for all of them.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from harnessrl.config import MINED_SUITES, SourceConfig
from harnessrl.harness import sandbox
from harnessrl.tasks.mine import mine_sources
from harnessrl.tasks.validate import EXPERT_FAILS, SNAPSHOT_PASSES, validate


class SandboxClock:
    """Sums the wall time of every Sandbox.run in this process, across threads."""

    def __init__(self) -> None:
        self.seconds, self.lock, self.original = 0.0, threading.Lock(), sandbox.Sandbox.run

    def __enter__(self) -> SandboxClock:
        clock = self

        def timed(self, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return clock.original(self, *args, **kwargs)
            finally:
                with clock.lock:
                    clock.seconds += time.perf_counter() - t0

        sandbox.Sandbox.run = timed
        return self

    def __exit__(self, *exc) -> None:
        sandbox.Sandbox.run = self.original


def configs(paths: list[str], per_suite: int) -> list[SourceConfig]:
    names = [p.split(":")[-1].rstrip("/").split("/")[-1] for p in paths]
    return [SourceConfig(name=n, path=p, split="heldout" if i == len(paths) - 1 else "train",
                         tasks=dict.fromkeys(MINED_SUITES, per_suite)) for i, (n, p) in enumerate(zip(names, paths, strict=True))]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", nargs="+", default=["stdlib:email", "stdlib:calendar", "stdlib:statistics"])
    ap.add_argument("--per-suite", type=int, default=60, help="the most tasks of each suite per source")
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="one run per value")
    ap.add_argument("--workers", type=int, default=4, help="episodes at once per source")
    args = ap.parse_args()
    sources = configs(args.sources, args.per_suite)

    runs = []
    for processes in args.processes:
        with tempfile.TemporaryDirectory(prefix="bench-mining-") as tmp, SandboxClock() as clock:
            t0 = time.perf_counter()
            kept, _, _, stats = mine_sources(sources, 0, Path(tmp), workers=args.workers, processes=processes)
            wall = time.perf_counter() - t0
            n = len(kept["train"]) + len(kept["heldout"])
            share = clock.seconds / wall if processes == 1 else None
            # Held-out checks on the untouched snapshots, again: validation already required it.
            held = kept["heldout"]
            _, _, dropped = validate(held, Path(tmp), workers=args.workers) if held else ([], {}, {})
            untouched_fail = sum(1 for t in held if dropped.get(t.id, ("",))[0] != SNAPSHOT_PASSES)
        runs.append({"processes": processes, "wall": wall, "tasks": n, "per_min": 60 * n / wall, "share": share,
                     "stats": stats, "held": len(held), "held_fail_untouched": untouched_fail})  # fmt: skip
        print(
            f"processes {processes}: {n} validated tasks in {wall:.1f} s = {60 * n / wall:.1f} tasks/min"
            + (f", sandbox {clock.seconds:.1f} s = {share:.2f}x wall" if share is not None else ""),
            flush=True,
        )

    base = runs[0]["per_min"]
    print("\n| processes | wall s | tasks | tasks/min | ratio to first | sandbox s / wall s |")
    print("|---|---|---|---|---|---|")
    for r in runs:
        share = f"{r['share']:.2f}" if r["share"] is not None else "-"
        print(
            f"| {r['processes']} | {r['wall']:.1f} | {r['tasks']} | {r['per_min']:.1f} | {r['per_min'] / base:.2f}x | {share} |"
        )

    stats = runs[0]["stats"]
    print("\n| suite | " + " | ".join(stats) + " | total kept | expert success | drops |")
    print("|---|" + "---|" * (len(stats) + 3))
    for suite in MINED_SUITES:
        per = [stats[s].get(suite, {"kept": 0, "candidates": 0}) for s in stats]
        drops: Counter[str] = Counter()
        tried = kept_all = 0
        for p in per:
            drops.update(p.get("dropped", {}))
            kept_all += p["kept"]
            tried += p["kept"] + p.get("dropped", {}).get(EXPERT_FAILS, 0)
        cells = " | ".join(f"{p['kept']}/{p['candidates']}" for p in per)
        rate = f"{kept_all / tried:.3f}" if tried else "-"
        print(f"| {suite} | {cells} | {kept_all} | {rate} | {dict(drops) or 'none'} |")
    r = runs[0]
    print(f"\nheld-out ({sources[-1].name}): {r['held']} tasks kept; the check fails on the untouched snapshot "
          f"for {r['held_fail_untouched']} of them")  # fmt: skip


if __name__ == "__main__":
    main()
