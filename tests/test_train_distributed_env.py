"""Setting up a single training process must not leak its rendezvous port to child processes."""

from __future__ import annotations

import os
import subprocess
import sys

from harnessrl.train import distributed


def test_single_process_setup_leaves_no_port_for_children() -> None:
    distributed.setup()
    assert "MASTER_PORT" not in os.environ and "MASTER_ADDR" not in os.environ
    # A child (e.g. `harnessrl run` started by a benchmark) sets up its own process group.
    code = "from harnessrl.train import distributed; print(distributed.setup())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "(0, 1)"
