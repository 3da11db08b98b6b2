"""Metrics as JSONL, one row per step, flushed as written so a crash loses at most one row."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from types import TracebackType


class MetricsWriter:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = path.open("a")

    def write(self, row: dict) -> None:
        self._f.write(json.dumps({"time": round(time.time(), 3), **row}) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


def read_metrics(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def snapshot(path: Path, saved: Path) -> None:
    """Copy a metrics file to `saved` inside a resume state, atomically. Call it *before* the state is
    saved: once `latest` names step N, the copy holds step N; a kill between the two only leaves rows
    past the saved step, which `restore` drops."""
    if not path.exists():
        return
    saved.parent.mkdir(parents=True, exist_ok=True)
    tmp = saved.with_name(saved.name + ".tmp")
    shutil.copyfile(path, tmp)
    os.replace(tmp, saved)


def restore(saved: Path, path: Path, step: int) -> None:
    """On resume, `path` gets the rows of `saved` that the resumed state holds (steps <= `step`)."""
    rows = [m for m in read_metrics(saved) if m["step"] <= step]
    path.write_text("".join(json.dumps(m) + "\n" for m in rows))
