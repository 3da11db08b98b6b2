"""Append-only JSONL logs that survive a crash: the served turns, and the feedback on them.

Each record is one line, written with a single `write` on a file opened O_APPEND and, unless told
otherwise, fsynced before the request that produced it is answered. A crash can therefore lose
nothing that a client saw, and can at worst leave the last line torn; readers skip torn lines and
count them.

The server appends through `append_then`: a writer thread takes every record waiting, writes them in
one `write` and one fsync (group commit), then tells each request its record is on disk. The
generation thread never waits for the disk, and a busy server pays one fsync per batch, not per turn.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any


class AppendLog:
    """One JSONL file, appended to by many threads."""

    def __init__(self, path: Path, fsync: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._lock = threading.Lock()
        self._pending: queue.Queue = queue.Queue()  # records for the writer thread (append_then)
        self._writer: threading.Thread | None = None
        self._heal()

    def _heal(self) -> None:
        """End a torn last line (left by a crash or a failed write) with a newline, so the next record
        starts clean."""
        try:
            size = self.path.stat().st_size
            if size:
                with self.path.open("rb") as f:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        os.write(self._fd, b"\n")
        except OSError:
            pass  # the disk is still failing; the reader counts the torn line

    def append(self, record: dict[str, Any]) -> None:
        self._write([_line(record)])

    def _write(self, lines: list[bytes]) -> None:
        data = memoryview(b"".join(lines))
        with self._lock:
            try:
                while data:  # a short write (a full disk, a signal) must not pass for a whole one
                    data = data[os.write(self._fd, data) :]
                if self.fsync:
                    os.fsync(self._fd)
            except OSError:
                self._heal()  # end whatever part went out, so the next record starts on its own line
                raise

    def append_then(self, record: dict[str, Any], then: Callable[[BaseException | None], None]) -> None:
        """Queue a record; `then(None)` once it is on disk, or `then(error)` if it could not be written.
        `then` runs on the writer thread."""
        with self._lock:
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_pending, name="harnessrl-log", daemon=True)
                self._writer.start()
        self._pending.put((_line(record), then))

    def _write_pending(self) -> None:
        while True:
            batch = [self._pending.get()]
            while True:
                try:
                    batch.append(self._pending.get_nowait())
                except queue.Empty:
                    break
            stop = None in batch  # close(): write what came before it, then stop
            batch = [b for b in batch if b is not None]
            error = None
            try:
                if batch:
                    self._write([line for line, _ in batch])
            except OSError as e:
                error = e
            for _, then in batch:
                then(error)
            if stop:
                return

    def close(self) -> None:
        if self._writer is not None:
            self._pending.put(None)
            self._writer.join()
        with self._lock:
            os.close(self._fd)


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()


def read_log(path: Path | str) -> tuple[list[dict[str, Any]], int]:
    """The records of a log in the order written, and how many torn lines were skipped: a line that
    is not a JSON object is what a crash mid-write leaves (since ended by the next writer's newline,
    or still the last line). The callers count and report them; nothing is dropped unseen."""
    path = Path(path)
    if not path.is_file():
        return [], 0
    records, torn = [], 0
    for raw in path.read_bytes().split(b"\n"):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            torn += 1
    return records, torn
