"""The artifact store: checkpoints, metrics, reports and manifests, kept in a local folder or S3.

Both stores keep a sha256 beside every object (S3 object metadata; a hidden sidecar file locally)
and check it on every download, which lands in a temp file renamed into place only once verified.
Folders go up file by file, then an index of their files, then `manifest.json` last (folders.py),
so a reader that sees a manifest also sees every file it names.

    store = open_store("s3://bucket/prefix", StoreConfig(endpoint_url="http://127.0.0.1:9000"))
    put_dir(store, Path("runs/x/checkpoints/sft"), "checkpoints/abc123")
"""

from __future__ import annotations

from typing import Protocol

from harnessrl.config import StoreConfig


class ChecksumError(OSError):
    """A downloaded object's sha256 differs from the one stored with it. The message names the key."""


class IncompleteError(FileNotFoundError):
    """A folder in the store lacks its index or manifest: an upload that never finished."""


class Store(Protocol):
    uri: str

    def put_file(self, src, key: str) -> str: ...
    def put_bytes(self, data: bytes, key: str) -> str: ...
    def get_file(self, key: str, dst, sha256: str | None = None): ...
    def get_bytes(self, key: str) -> bytes: ...
    def exists(self, key: str) -> bool: ...


def open_store(uri: str, cfg: StoreConfig | None = None) -> Store:
    """`s3://bucket/prefix` gives the S3 store; anything else is a local directory."""
    cfg = cfg or StoreConfig()
    if uri.startswith("s3://"):
        from harnessrl.store.s3 import S3Store

        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        return S3Store(bucket, prefix, cfg)
    from harnessrl.store.local import LocalStore

    return LocalStore(uri)
