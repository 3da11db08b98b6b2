"""The lineage manifest: everything that made a checkpoint, sealed by its own hash."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from harnessrl.config import config_hash
from harnessrl.data.md5 import dvc_dir_md5
from harnessrl.io import tree_digest
from harnessrl.lineage.manifest import MANIFEST, chain, manifest_hash, read_manifest, write_manifest
from tests.test_lineage_verify import make_chain, make_data


def test_manifest_records_origin_runtime_and_seal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFP_RUN_ID", "run-123")
    monkeypatch.setenv("KFP_POD_NAME", "harnessrl-rl-abc")
    monkeypatch.setenv("HARNESSRL_IMAGE_DIGEST", "sha256:" + "e" * 64)
    monkeypatch.delenv("KFP_TASK_ID", raising=False)
    data = make_data(tmp_path / "data")
    t0 = time.time()
    base, _, rl = make_chain(tmp_path / "c", data)
    m = read_manifest(rl)
    assert m["schema"] == 2 and m["stage"] == "rl"
    assert m["id"] == tree_digest(rl, exclude=(MANIFEST, "metrics.jsonl"))
    cpt = read_manifest(rl.parent / "cpt")
    assert m["parent"] == {"id": cpt["id"], "manifest_hash": cpt["manifest_hash"], "path": str(rl.parent / "cpt")}
    assert m["config_hash"] == config_hash(m["config"])
    assert m["data_md5"] == dvc_dir_md5(data) == m["datasets"]["data"]["md5"]
    assert m["datasets"]["data"]["path"] == str(data.resolve())
    assert set(m["code"]) == {"commit", "dirty", "hash"} and len(m["code"]["hash"]) == 64
    assert "torch" in m["packages"]
    assert m["runtime"] == {
        "kfp_run_id": "run-123",
        "kfp_pod_name": "harnessrl-rl-abc",
        "image_digest": "sha256:" + "e" * 64,
    }
    assert m["seed"] == 0 and m["world_size"] == 2  # from the stage's config slice
    assert m["policy_version"] == 2  # the last metrics.jsonl row
    assert read_manifest(base)["policy_version"] is None
    assert m["metrics"] == {"loss": 1.0 / 3}
    assert t0 <= m["started_at"] <= m["finished_at"] <= time.time()
    assert m["manifest_hash"] == manifest_hash(m) == config_hash({k: v for k, v in m.items() if k != "manifest_hash"})


def test_world_size_and_policy_version_given_explicitly_win(tmp_path: Path) -> None:
    ckpt = tmp_path / "x"
    ckpt.mkdir()
    (ckpt / "w.bin").write_bytes(b"w")
    m = write_manifest(
        ckpt,
        stage="rl",
        config={"seed": 1, "stage": {"trainer_world_size": 8}},
        parent=None,
        data_md5=None,
        metrics={"reward": 0.5, "policy_version": 7},
        started=0.0,
        seed=1,
    )
    assert m["world_size"] == 8 and m["policy_version"] == 7 and m["datasets"]["data"] == {"md5": None, "path": None}
    assert json.loads((ckpt / MANIFEST).read_text()) == m


def test_chain_finds_a_parent_by_seal_beside_the_checkpoint_even_with_equal_weights(tmp_path: Path) -> None:
    # The store's layout, <root>/<manifest_hash>/..., where the recorded paths no longer exist, and
    # rl made no update: its weights id equals cpt's, which must not confuse the walk.
    base, cpt, rl = make_chain(tmp_path / "c", make_data(tmp_path / "d"))
    (rl / "model.safetensors").write_bytes((cpt / "model.safetensors").read_bytes())
    m = read_manifest(cpt)
    write_manifest(rl, stage="rl", config={}, parent=cpt, data_md5=None, metrics={}, started=0.0, seed=0)
    assert read_manifest(rl)["id"] == m["id"]
    keys = {}
    for p in (base, cpt, rl):
        keys[p.name] = read_manifest(p)["manifest_hash"]
        p.rename(tmp_path / keys[p.name])
    assert [m["stage"] for _, m in chain(tmp_path / keys["rl"])] == ["rl", "cpt", "base"]
