"""The live loop's proof: serve a checkpoint, let simulated users work with it and send feedback, run
gated cycles, and print each cycle's figures, seed by seed, with the spread across seeds.

    python bench/live.py --checkpoint RUN/checkpoints/rl --cycles 3 --sessions 64 --seeds 0 1 2

Each seed gets its own live folder under --root and its own server (`harnessrl serve`, a subprocess,
as users start it). A round is: `harnessrl live simulate` (honest users, over HTTP), then `harnessrl
live cycle`, then wait until the server answers with whatever the cycle promoted. The figures of
round k are of the sessions the checkpoint served in round k had, so --cycles gated cycles take
--cycles + 1 rounds: the last round measures the last promotion.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import httpx

from harnessrl.cli import main as cli
from harnessrl.serve.process import start_server, stop_server
from harnessrl.serve.session_log import read_log


def wait_for_served(url: str, live_dir: Path, timeout_s: float = 120) -> str:
    """The version the server answers with once it serves what served.json names."""
    want = json.loads((live_dir / "served.json").read_text())["version"]
    deadline = time.monotonic() + timeout_s
    while (got := httpx.get(url + "/health").json()["policy_version"]) != want:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server still serves {got[:12]}, not {want[:12]}")
        time.sleep(0.5)
    return got


def one_seed(args: argparse.Namespace, seed: int) -> list[dict]:
    live = args.root / f"seed{seed}" / "live"
    if live.exists():
        raise SystemExit(f"{live} exists: pass a fresh --root")
    live.mkdir(parents=True)
    overrides = [*args.overrides, f"live.min_sessions={args.sessions}", f"seed={seed}"]
    proc, url = start_server(args.checkpoint, live, "--seed", str(seed))
    try:
        for k in range(args.cycles + 1):
            rc = cli(["live", "simulate", *overrides, "--endpoint", url + "/v1", "--model", "tiny", "--live-dir",
                      str(live), "--sessions", str(args.sessions), "--seed", str(seed * 1000 + k)])  # fmt: skip
            assert rc == 0, f"simulate failed ({rc})"
            assert cli(["live", "cycle", *overrides, "--live-dir", str(live)]) == 0
            wait_for_served(url, live)
    finally:
        stop_server(proc)
    return [c for c in read_log(live / "cycles.jsonl")[0] if c["result"] != "waiting"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--checkpoint", type=Path, required=True, help="the checkpoint served first, e.g. RUN/checkpoints/rl"
    )
    ap.add_argument("--cycles", type=int, default=3, help="gated cycles per seed (default: %(default)s)")
    ap.add_argument("--sessions", type=int, default=64, help="simulated sessions per cycle (default: %(default)s)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--root", type=Path, default=Path("/tmp/harnessrl-live-bench"))
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for `live simulate` and `live cycle`")
    args = ap.parse_args()
    runs = {seed: one_seed(args, seed) for seed in args.seeds}
    print("\n| seed | cycle | sessions | kept | dissatisfied | p50 s | p95 s | held-out served -> candidate | result |")
    print("|---|---|---|---|---|---|---|---|---|")
    for seed, cycles in runs.items():
        for c in cycles:
            h = c.get("heldout_success") or {}
            held = f"{h['served']:.3f} -> {h['candidate']:.3f}" if h else "-"
            print(f"| {seed} | {c['cycle']} | {c['sessions']} | {c['kept_rate']:.3f} | {c['dissatisfied_rate']:.3f} | "
                  f"{c['latency_p50_s']:.2f} | {c['latency_p95_s']:.2f} | {held} | {c['result']} |")  # fmt: skip
    first = [cs[0]["kept_rate"] for cs in runs.values()]
    last = [cs[-1]["kept_rate"] for cs in runs.values()]
    gain = [b - a for a, b in zip(first, last, strict=True)]

    def ms(xs: list[float]) -> str:
        return f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.3f}"

    print(f"\nkept rate: first round {ms(first)}, last round {ms(last)}, change {ms(gain)} (mean ± std over seeds)")


if __name__ == "__main__":
    main()
