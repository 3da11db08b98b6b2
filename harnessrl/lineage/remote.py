"""Checkpoint chains in the artifact store, laid out by manifest seal: `<store>/<manifest_hash>/...`.

Named by content, so pushing a chain twice uploads nothing new, and a child finds its parent
beside it by the seal its manifest records (manifest.parent_path). Fetching goes through the store,
so every file is checked against its sha256 on the way down.
"""

from __future__ import annotations

import json
from pathlib import Path

from harnessrl.config import StoreConfig
from harnessrl.lineage.manifest import MANIFEST, chain, store_key
from harnessrl.store import open_store
from harnessrl.store.folders import get_dir, put_dir


def push_chain(ckpt: Path, uri: str, cfg: StoreConfig | None = None) -> list[tuple[str, bool]]:
    """Upload the checkpoint and its ancestors, oldest first; returns (uri, uploaded) per checkpoint."""
    store = open_store(uri, cfg)
    out = []
    for path, m in reversed(chain(ckpt)):
        key = store_key(m)
        done = store.exists(f"{key}/{MANIFEST}")  # the manifest goes up last: present means complete
        if not done:
            put_dir(store, path, key)
        out.append((f"{store.uri}/{key}", not done))
    return out


def fetch_chain(uri: str, dst: Path, cfg: StoreConfig | None = None, weights: bool = True) -> Path:
    """Download `uri` (`<store>/<name>`) and its ancestors into `dst/<key>`; returns the first's folder.

    Stops quietly at an ancestor the store lacks: verify then names it as the missing parent.
    Without `weights`, only manifests come down (enough for show and diff).
    """
    root, _, name = uri.rstrip("/").rpartition("/")
    store = open_store(root, cfg)
    only = None if weights else {MANIFEST}
    first = get_dir(store, name, Path(dst) / name, only)
    cur = first
    while (parent := json.loads((cur / MANIFEST).read_text()).get("parent")) and parent.get("manifest_hash"):
        key = parent["manifest_hash"]
        if (Path(dst) / key).exists():
            break
        try:
            cur = get_dir(store, key, Path(dst) / key, only)
        except FileNotFoundError:
            break
    return first


def local_copy(ckpt: str, dst: Path, cfg: StoreConfig | None = None, weights: bool = True) -> Path:
    """A checkpoint argument as a local folder: a path as is, an s3:// URI fetched into `dst`."""
    if ckpt.startswith("s3://"):
        if ckpt.removeprefix("s3://").strip("/").count("/") < 1:
            raise ValueError(f"{ckpt}: expected s3://bucket/prefix/<checkpoint>")
        return fetch_chain(ckpt, dst, cfg, weights)
    path = Path(ckpt)
    if not (path / MANIFEST).is_file():
        raise FileNotFoundError(f"{ckpt}: no {MANIFEST} here; not a harnessrl checkpoint (or not complete)")
    return path
