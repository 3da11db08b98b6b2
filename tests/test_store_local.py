"""The local store: the same folder contract as S3, on a directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnessrl.store import ChecksumError, IncompleteError, open_store
from harnessrl.store.folders import INDEX, get_dir, put_dir
from tests.test_store_s3 import checkpoint, same_tree


def test_local_round_trip_verifies_and_writes_the_manifest_last(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    src = checkpoint(tmp_path / "ckpt")
    put_dir(store, src, "ckpt/a")
    # Write order, seen from outside: each object lands by an atomic rename, the manifest's last.
    landed = sorted((p.stat().st_mtime_ns, p.name) for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert [n for _, n in landed if not n.endswith(".sha256")][-2:] == [INDEX, "manifest.json"]
    assert same_tree(src, get_dir(store, "ckpt/a", tmp_path / "back"))


def test_local_tampering_and_partial_uploads_are_refused(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    put_dir(store, checkpoint(tmp_path / "ckpt"), "ckpt/a")
    (tmp_path / "store" / "ckpt" / "a" / "tok" / "tokenizer.json").write_text('{"edited": 1}')
    with pytest.raises(ChecksumError, match=r"ckpt/a/tok/tokenizer\.json: sha256 mismatch"):
        get_dir(store, "ckpt/a", tmp_path / "back")
    assert not (tmp_path / "back").exists()
    # An upload killed before its index: not a folder a reader will take.
    store.put_bytes(b"weights", "ckpt/b/model.safetensors")
    with pytest.raises(IncompleteError, match=INDEX):
        get_dir(store, "ckpt/b", tmp_path / "back")
    with pytest.raises(ValueError, match="leaves the store root"):
        store.put_bytes(b"x", "../escape")
