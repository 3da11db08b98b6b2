"""Running `harnessrl serve`: the live folder, the app under uvicorn, and the watch for promotions.

The live folder is what `serve` and `harnessrl live` share:

    served.json     the checkpoint to serve; the live cycle rewrites it (atomically) to promote
    serving.json    the checkpoint `serve` actually serves: written at start and after each swap
    sessions.jsonl  every served turn (serve appends)
    feedback.jsonl  every feedback event (serve and `live ingest` append)

`serve` watches served.json and hot-swaps to whatever it names, so promotion needs no restart and no
admin endpoint: anyone who can write the live folder can already change what is served.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path

from harnessrl.config import EngineConfig
from harnessrl.io import write_json

SERVED, SERVING, SESSIONS, FEEDBACK = "served.json", "serving.json", "sessions.jsonl", "feedback.jsonl"


def served_checkpoint(live_dir: Path) -> Path | None:
    """The checkpoint served.json names, or None before anything is served."""
    path = Path(live_dir) / SERVED
    if not path.is_file():
        return None
    try:
        return Path(json.loads(path.read_text())["checkpoint"])
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(f"{path}: not a served.json ({{'checkpoint': PATH, ...}})") from None


def set_served(live_dir: Path, checkpoint: Path, version: str) -> None:
    write_json(Path(live_dir) / SERVED, {"checkpoint": str(Path(checkpoint).resolve()), "version": version,
                                         "since": time.time()})  # fmt: skip


def set_serving(live_dir: Path, checkpoint: Path, version: str) -> None:
    write_json(Path(live_dir) / SERVING, {"checkpoint": str(checkpoint), "version": version, "since": time.time()})


def serving_version(live_dir: Path) -> str | None:
    """The version `serve` last said it serves, or None if no server ever ran on this folder."""
    path = Path(live_dir) / SERVING
    try:
        return json.loads(path.read_text())["version"] if path.is_file() else None
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(f"{path}: not a serving.json") from None


def start_checkpoint(live_dir: Path, checkpoint: Path | None) -> Path:
    """What to serve at start: --checkpoint for a new live folder, the promoted one for an existing
    folder. A --checkpoint that contradicts the folder is refused rather than silently overridden."""
    promoted = served_checkpoint(live_dir)
    if promoted is None and checkpoint is None:
        raise ValueError(f"--checkpoint: {live_dir} serves nothing yet; say which checkpoint to serve")
    if promoted is not None and checkpoint is not None and Path(checkpoint).resolve() != promoted.resolve():
        raise ValueError(f"--checkpoint {checkpoint}: {live_dir / SERVED} serves {promoted}, promoted since; "
                         "leave --checkpoint out to serve it, or use another --live-dir")  # fmt: skip
    return promoted or Path(checkpoint)


def watch_promotions(live_dir: Path, generator, dtype: str, every_s: float, stop: threading.Event) -> None:
    """Hot-swap whenever served.json names another checkpoint. A checkpoint that fails to load or
    does not fit keeps the served one, with a line on stderr."""
    path = Path(live_dir) / SERVED
    refused: Path | None = None  # tried once and failed: not again until served.json changes
    while not stop.wait(every_s):
        try:
            wanted = served_checkpoint(live_dir)
        except Exception as e:  # a half-visible file on a network volume, say: try again next tick
            print(f"[serve] {path}: {e}", file=sys.stderr, flush=True)
            continue
        if wanted is None or wanted.resolve() in (generator.current.path, refused):
            continue
        t0 = time.perf_counter()
        try:
            new = generator.swap(wanted, dtype)
        except Exception as e:
            print(f"[serve] not swapping to {wanted}: {e}", file=sys.stderr, flush=True)
            refused = wanted.resolve()
            continue
        set_serving(live_dir, new.path, new.version)
        print(f"[serve] swapping to {new.version[:12]} ({wanted}), loaded in {time.perf_counter() - t0:.2f} s "
              f"({path})", flush=True)  # fmt: skip


def listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound now; a port in use is a ValueError naming --port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ValueError(f"--host {host} --port {port}: cannot listen there ({e.strerror})") from None
    return sock


def serve(
    live_dir: Path,
    checkpoint: Path | None,
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str = "harnessrl",
    dtype: str = "float32",
    max_batch: int = 8,
    max_tokens: int = 256,
    fsync: bool = True,
    log: bool = True,
    watch_s: float = 1.0,
    seed: int = 0,
    engine: EngineConfig | None = None,
    api_key: str | None = None,
) -> None:
    """Serve until interrupted. `engine` None or kind hf: the in-process generation thread; kind vllm:
    vLLM's own OpenAI server behind the same front (vllm_upstream.py)."""
    import uvicorn

    from harnessrl.live.feedback import FeedbackStore
    from harnessrl.serve.app import Served, create_app
    from harnessrl.serve.engine import Checkpoint, Generator
    from harnessrl.serve.session_log import AppendLog, read_log

    live_dir = Path(live_dir)
    live_dir.mkdir(parents=True, exist_ok=True)
    sock = listen(host, port)  # first: vLLM picks free ports of its own while it starts, and must not take ours
    path = start_checkpoint(live_dir, checkpoint).resolve()
    if engine is not None and engine.kind == "vllm":
        from harnessrl.engines.vllm import check_installed
        from harnessrl.serve.engine import checkpoint_version
        from harnessrl.serve.vllm_upstream import Upstreams, start_upstream

        check_installed("vllm")
        generator = Upstreams(
            start_upstream(path, checkpoint_version(path), engine, dtype, live_dir.parent / "vllm-logs")
        )
    else:
        generator = Generator(Checkpoint.load(path, dtype), max_batch=max_batch, seed=seed)
    ckpt = generator.current
    if served_checkpoint(live_dir) is None:
        set_served(live_dir, ckpt.path, ckpt.version)
    set_serving(live_dir, ckpt.path, ckpt.version)
    sessions = AppendLog(live_dir / SESSIONS, fsync) if log else None
    served = Served(generator, sessions, FeedbackStore(live_dir / FEEDBACK, fsync), name, max_tokens, api_key)
    served.session_ids |= {r.get("session_id") for r in read_log(live_dir / SESSIONS)[0]}
    stop = threading.Event()
    watcher = threading.Thread(target=watch_promotions, args=(live_dir, generator, dtype, watch_s, stop), daemon=True)
    watcher.start()
    print(f"[serve] {name}: {ckpt.path} (version {ckpt.version[:12]}) on http://{host}:{port}/v1, "
          f"{'logging to' if log else 'NOT logging sessions (--no-log) in'} {live_dir}", flush=True)  # fmt: skip
    try:
        config = uvicorn.Config(create_app(served), log_level="warning", timeout_graceful_shutdown=30)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        stop.set()
        generator.close()
        if sessions is not None:
            sessions.close()
        served.feedback.close()
