"""Folders in the store: every file, then the index, then `manifest.json` last.

The index (`.harnessrl-index.json`) lists each file's relative path, size and sha256. A reader
takes a folder only through its index, so stray or stale objects under the prefix are ignored, and
every file is checked against the index's sha256 as it lands. The manifest goes up after the index:
a checkpoint whose manifest is visible has all of its files, and its index, already in place.
"""

from __future__ import annotations

import json
from pathlib import Path

from harnessrl.io import atomic_dir, file_digest
from harnessrl.lineage.manifest import MANIFEST
from harnessrl.store import IncompleteError, Store

INDEX = ".harnessrl-index.json"


def put_dir(store: Store, src: Path, prefix: str) -> dict:
    """Upload `src` under `prefix`; returns the index. Re-uploading the same folder is harmless."""
    src = Path(src)
    names = sorted(p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file())
    if INDEX in names:
        raise ValueError(f"{src}: contains {INDEX}, the store's own index name")
    index: dict[str, dict] = {"files": {}}
    for name in names:
        if name != MANIFEST:
            index["files"][name] = {
                "size": (src / name).stat().st_size,
                "sha256": store.put_file(src / name, f"{prefix}/{name}"),
            }
    has_manifest = MANIFEST in names
    if has_manifest:
        index["files"][MANIFEST] = {"size": (src / MANIFEST).stat().st_size, "sha256": file_digest(src / MANIFEST)}
    store.put_bytes(_dumps(index), f"{prefix}/{INDEX}")
    if has_manifest:  # last: its presence means the files and the index are all there
        store.put_file(src / MANIFEST, f"{prefix}/{MANIFEST}")
    return index


def get_dir(store: Store, prefix: str, dst: Path, only: set[str] | None = None) -> Path:
    """Download the folder at `prefix` into `dst`, which appears whole and verified, or not at all.
    `only` limits it to those relative paths (e.g. just the manifest)."""
    try:
        index = json.loads(store.get_bytes(f"{prefix}/{INDEX}"))
    except FileNotFoundError:
        raise IncompleteError(f"{store.uri}/{prefix}: no {INDEX}; not a folder, or its upload never finished") from None
    if MANIFEST in index["files"] and not store.exists(f"{prefix}/{MANIFEST}"):
        raise IncompleteError(f"{store.uri}/{prefix}: no {MANIFEST} yet; its upload has not finished")
    with atomic_dir(dst) as tmp:
        for name, meta in index["files"].items():
            if only is not None and name not in only:
                continue
            store.get_file(f"{prefix}/{name}", tmp / name, sha256=meta["sha256"])
    return Path(dst)


def _dumps(obj: dict) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()
