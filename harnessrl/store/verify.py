"""The one place a download becomes a file: hash the temp copy, then rename it into place or drop it."""

from __future__ import annotations

import os
from pathlib import Path

from harnessrl.io import file_digest


def verified_move(tmp: Path, dst: Path, expected: str, name: str) -> Path:
    """Rename `tmp` to `dst` if its sha256 is `expected`; else delete it and raise naming `name`."""
    from harnessrl.store import ChecksumError

    try:
        got = file_digest(tmp)
        if got != expected:
            raise ChecksumError(f"{name}: sha256 mismatch: stored {expected[:16]}…, downloaded {got[:16]}…")
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst
