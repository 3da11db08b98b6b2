"""DVC's content hashes, computed the way `dvc add` does, so a task's cache key is the data's identity."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from harnessrl.io import file_digest


def dvc_dir_md5(root: Path) -> str:
    """md5 of DVC's directory listing: the JSON list of {md5, relpath} sorted by relpath, plus '.dir'."""
    entries = [
        {"md5": file_digest(p, "md5"), "relpath": p.relative_to(root).as_posix()}
        for p in sorted(root.rglob("*"))
        if p.is_file()
    ]
    entries.sort(key=lambda e: e["relpath"])
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode()).hexdigest() + ".dir"
