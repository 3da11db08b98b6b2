"""`harnessrl serve` in a subprocess on loopback, as a user starts it: for tests, benchmarks and the
live demo, which must exercise the real server over HTTP, not an in-process shortcut."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    """A port free on loopback now (the OS's pick): for servers, and for torch.distributed's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(checkpoint: Path | None, live_dir: Path, *extra: str, name: str = "tiny",
                 timeout_s: float = 120) -> tuple[subprocess.Popen, str]:  # fmt: skip
    """Start `harnessrl serve` and wait for /health; returns the process and its base URL. Its output
    goes to serve-PORT.log beside the live folder."""
    port = free_port()
    argv = [sys.executable, "-m", "harnessrl.cli", "serve", "--live-dir", str(live_dir), "--port", str(port),
            "--served-model-name", name, *extra]  # fmt: skip
    if checkpoint is not None:
        argv += ["--checkpoint", str(checkpoint)]
    Path(live_dir).parent.mkdir(parents=True, exist_ok=True)
    log = Path(live_dir).parent / f"serve-{port}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=os.environ | {"OMP_NUM_THREADS": "1"},
                                start_new_session=True)  # its own group: stop_server stops its vLLM too  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url + "/health").status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            raise RuntimeError(f"serve did not come up:\n{log.read_text()[-3000:]}")
        time.sleep(0.3)


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM to serve's process group, vLLM's server and engine included, then SIGKILL if needed: a
    vLLM left running would hold its memory and cores."""
    import signal

    for sig, wait in ((signal.SIGTERM, 90), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)  # serve and everything it started (vLLM's server and engine)
            proc.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue
