"""The S3 store against a real S3-compatible server (moto, loopback) with faults injected in between."""

from __future__ import annotations

import os
from pathlib import Path

import boto3
import pytest

from harnessrl.config import StoreConfig
from harnessrl.store import ChecksumError, IncompleteError, open_store
from harnessrl.store.folders import INDEX, get_dir, put_dir
from tests.s3_server import S3, Fault, s3  # noqa: F401

MiB = 1 << 20


def store_via(s3: S3, url: str, **kw):  # noqa: F811
    cfg = StoreConfig(endpoint_url=url, multipart_threshold_mb=5, multipart_chunksize_mb=5, max_concurrency=2, **kw)
    return open_store(f"s3://{s3.bucket}/runs", cfg)


def raw(s3: S3):  # noqa: F811
    return boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1")


def checkpoint(root: Path, big: int = 0) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"hidden": 128}')
    (root / "model.safetensors").write_bytes(os.urandom(big or 4096))
    (root / "tok" / "tokenizer.json").parent.mkdir()
    (root / "tok" / "tokenizer.json").write_text("{}")
    (root / "manifest.json").write_text('{"id": "x"}')
    return root


def same_tree(a: Path, b: Path) -> bool:
    files = lambda r: {p.relative_to(r).as_posix(): p.read_bytes() for p in r.rglob("*") if p.is_file()}
    return files(a) == files(b)


def test_folder_round_trip_uploads_big_files_in_parts_and_the_manifest_last(s3: S3, tmp_path: Path) -> None:  # noqa: F811
    src = checkpoint(tmp_path / "ckpt", big=11 * MiB + 123)
    put_dir(store_via(s3, s3.proxy.url), src, "ckpt/abc")
    puts = [(m, p) for m, p, _ in s3.proxy.log if m in ("PUT", "POST")]
    # Multipart: 3 parts of <= 5 MiB for the 11 MiB file, between create and complete.
    assert sum("partNumber=" in p for _, p in puts) == 3
    # The manifest is the very last write, right after the index.
    assert puts[-1][1].startswith(f"/{s3.bucket}/runs/ckpt/abc/manifest.json")
    assert puts[-2][1].startswith(f"/{s3.bucket}/runs/ckpt/abc/{INDEX}")
    meta = raw(s3).head_object(Bucket=s3.bucket, Key="runs/ckpt/abc/model.safetensors")["Metadata"]
    assert len(meta["sha256"]) == 64
    out = get_dir(store_via(s3, s3.endpoint), "ckpt/abc", tmp_path / "back")
    assert same_tree(src, out)


def test_5xx_throttling_and_dropped_connections_are_retried_and_nothing_is_lost(s3: S3, tmp_path: Path) -> None:  # noqa: F811
    src = checkpoint(tmp_path / "ckpt", big=11 * MiB)
    s3.proxy.faults = [
        Fault("500", "PUT", "partNumber=1", times=2),
        Fault("slowdown", "PUT", "partNumber=2", times=2),
        Fault("drop_request", "PUT", "partNumber=3"),
        Fault("drop_request", "PUT", "config.json"),
        Fault("slowdown", "PUT", INDEX),
        Fault("500", "PUT", "manifest.json"),
    ]
    put_dir(store_via(s3, s3.proxy.url), src, "ckpt/f")
    assert all(f.times == 0 for f in s3.proxy.faults), "every fault fired"
    assert len(s3.proxy.injected()) == 8
    # Downloads through faults: a throttled HEAD, a 500 and a response cut mid-body, all retried.
    s3.proxy.faults = [
        Fault("slowdown", "HEAD"),
        Fault("500", "GET", INDEX),
        Fault("drop_response", "GET", "model.safetensors"),
        Fault("drop_response", "GET", "tokenizer.json"),
    ]
    out = get_dir(store_via(s3, s3.proxy.url), "ckpt/f", tmp_path / "back")
    assert all(f.times == 0 for f in s3.proxy.faults)
    assert same_tree(src, out)
    assert not list(tmp_path.glob(".back*")) and not list(out.rglob(".*.tmp-*")), "no temp files left behind"


def test_retries_exhausted_raise_and_leave_no_manifest(s3: S3, tmp_path: Path) -> None:  # noqa: F811
    src = checkpoint(tmp_path / "ckpt")
    s3.proxy.faults = [Fault("500", "PUT", "model.safetensors", times=100)]
    with pytest.raises(Exception, match=r"InternalError|500"):
        put_dir(store_via(s3, s3.proxy.url, max_attempts=3), src, "ckpt/dead")
    assert len(s3.proxy.injected()) == 1 + 3, "the first try and exactly max_attempts retries"
    listed = raw(s3).list_objects_v2(Bucket=s3.bucket, Prefix="runs/ckpt/dead/").get("Contents", [])
    assert "runs/ckpt/dead/manifest.json" not in {o["Key"] for o in listed}
    with pytest.raises(IncompleteError, match="upload never finished"):
        get_dir(store_via(s3, s3.endpoint), "ckpt/dead", tmp_path / "back")
    assert not (tmp_path / "back").exists()


def test_a_corrupted_object_fails_its_checksum_naming_the_key(s3: S3, tmp_path: Path) -> None:  # noqa: F811
    src = checkpoint(tmp_path / "ckpt")
    put_dir(store_via(s3, s3.endpoint), src, "ckpt/c")
    # Someone overwrites the weights in place, keeping the old metadata.
    meta = raw(s3).head_object(Bucket=s3.bucket, Key="runs/ckpt/c/model.safetensors")["Metadata"]
    raw(s3).put_object(Bucket=s3.bucket, Key="runs/ckpt/c/model.safetensors", Body=b"evil", Metadata=meta)
    with pytest.raises(ChecksumError, match=r"runs/ckpt/c/model\.safetensors: sha256 mismatch"):
        get_dir(store_via(s3, s3.endpoint), "ckpt/c", tmp_path / "back")
    assert not (tmp_path / "back").exists(), "nothing half-written"
    store = store_via(s3, s3.endpoint)
    with pytest.raises(ChecksumError, match=r"model\.safetensors"):
        store.get_file("ckpt/c/model.safetensors", tmp_path / "w.bin")
    assert not (tmp_path / "w.bin").exists() and not list(tmp_path.glob(".w.bin.tmp-*"))
