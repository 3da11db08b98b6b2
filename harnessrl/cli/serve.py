"""`harnessrl serve`: a checkpoint behind an OpenAI-compatible server, every turn logged for live RL."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harnessrl.cli.common import EXIT_BAD_INPUT

DESCRIPTION = """\
Serve a checkpoint at /v1/chat/completions (tools, tool_calls and streaming in the OpenAI format; the
official openai client and `harnessrl agent --endpoint` work unchanged) and take feedback at
/v1/feedback. Every turn is appended to LIVE_DIR/sessions.jsonl (prompt and completion token ids,
behaviour logprobs, policy version, tool calls, time to first token and in all) and fsynced before
the response ends; the X-Session-Id header ties a conversation's turns together. When
`harnessrl live` promotes a checkpoint it rewrites LIVE_DIR/served.json, and this server hot-swaps
to it between two batches, dropping nothing; each response names its checkpoint
(system_fingerprint, X-Policy-Version). A bad request gets a 4xx in OpenAI's error shape.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve a checkpoint over the OpenAI API, logging sessions for live RL",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--checkpoint", type=Path, help="a checkpoint folder (default: what LIVE_DIR/served.json names)")
    p.add_argument("--live-dir", type=Path, default=Path("runs/live"), help="the live folder (default: %(default)s)")
    p.add_argument("--host", default="127.0.0.1", help="default: %(default)s (loopback only)")
    p.add_argument("--port", type=int, default=8000, help="default: %(default)s")
    p.add_argument(
        "--served-model-name", default="harnessrl", help="the model name clients ask for (default: %(default)s)"
    )
    p.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="default: %(default)s"
    )
    p.add_argument("--max-batch", type=int, help="hf: requests decoded together (default: 8)")
    p.add_argument(
        "--max-tokens", type=int, default=256, help="a turn's cap when the request sets none (default: %(default)s)"
    )
    p.add_argument(
        "--no-fsync", action="store_true", help="do not fsync each log record (a crash may lose the last ones)"
    )
    p.add_argument("--engine", choices=["hf", "vllm"], default="hf",
                   help="hf: generate in this process; vllm: vLLM's own OpenAI server (Hermes tool parser) behind "
                   "this one, which validates and logs as for hf (default: %(default)s)")  # fmt: skip
    p.add_argument("--gpu-memory-utilization", type=float,
                   help="vllm: the share of GPU memory vLLM may take (default: engine.gpu_memory_utilization's)")  # fmt: skip
    p.add_argument("--tensor-parallel-size", type=int, help="vllm: GPUs per engine (default: 1)")
    p.add_argument("--api-key", default=os.environ.get("HARNESSRL_API_KEY"),
                   help="require Authorization: Bearer KEY on /v1 (default: $HARNESSRL_API_KEY, which `harnessrl agent` "
                   "and `live simulate` also send; none: open, so keep the server on loopback or behind a gateway)")  # fmt: skip
    p.add_argument(
        "--no-log", action="store_true", help="no session log: turns no live cycle can train on (for benchmarks)"
    )
    p.add_argument("--seed", type=int, help="hf: the sampling seed of requests without their own (default: 0)")


def cmd_serve(args: argparse.Namespace) -> int:
    from harnessrl.config import EngineConfig
    from harnessrl.model.checkpoint import CheckpointError
    from harnessrl.serve.server import serve

    # A flag the chosen engine would ignore is refused: the server runs the way its command line reads.
    ignored = [f for f, v in (("--max-batch", args.max_batch), ("--seed", args.seed)) if v is not None]
    ignored = ignored if args.engine == "vllm" else []
    if args.engine == "hf":
        ignored += [f for f, v in (("--gpu-memory-utilization", args.gpu_memory_utilization),
                                   ("--tensor-parallel-size", args.tensor_parallel_size)) if v is not None]  # fmt: skip
    if ignored:
        print(f"harnessrl: error: {', '.join(ignored)}: no effect with --engine {args.engine}", file=sys.stderr)
        return EXIT_BAD_INPUT
    args.max_batch, args.seed = args.max_batch or 8, args.seed or 0
    for name in ("port", "max_batch", "max_tokens"):
        if getattr(args, name) <= 0 or (name == "port" and args.port > 65535):
            print(
                f"harnessrl: error: --{name.replace('_', '-')}: {getattr(args, name)} is out of range", file=sys.stderr
            )
            return EXIT_BAD_INPUT
    try:
        given = {
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "tensor_parallel_size": args.tensor_parallel_size,
        }
        engine = EngineConfig(kind=args.engine, **{k: v for k, v in given.items() if v is not None})
        serve(args.live_dir, args.checkpoint, args.host, args.port, args.served_model_name, args.dtype,
              args.max_batch, args.max_tokens, not args.no_fsync, not args.no_log, seed=args.seed, engine=engine,
              api_key=args.api_key or None)  # fmt: skip
    except (ValueError, CheckpointError, FileNotFoundError) as e:
        print(f"harnessrl: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0
