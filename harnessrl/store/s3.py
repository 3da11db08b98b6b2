"""The S3 store (or any S3-compatible server: MinIO, Ceph, moto) through boto3.

Failures are botocore's to retry: `Config(retries=...)` in standard or adaptive mode retries 5xx,
throttling (503 SlowDown) and dropped connections with backoff, per request, so one lost part of a
multipart upload is resent alone. s3transfer splits large files into parts (TransferConfig) and
sends them in parallel. Every object carries its sha256 as metadata (`x-amz-meta-sha256`), checked
after every download before the temp file is renamed into place.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from pathlib import Path

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

from harnessrl.config import StoreConfig
from harnessrl.io import file_digest
from harnessrl.store.verify import verified_move

MiB = 1 << 20


class S3Store:
    def __init__(self, bucket: str, prefix: str, cfg: StoreConfig) -> None:
        if not bucket:
            raise ValueError("s3 store needs a bucket: s3://bucket/prefix")
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.uri = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self.client = boto3.session.Session().client(
            "s3",
            endpoint_url=cfg.endpoint_url,
            region_name=cfg.region,
            config=Config(
                retries={"mode": cfg.retry_mode, "max_attempts": cfg.max_attempts},
                connect_timeout=cfg.connect_timeout_s,
                read_timeout=cfg.read_timeout_s,
                # An endpoint like http://127.0.0.1:9000 has no bucket subdomains.
                s3={"addressing_style": "path" if cfg.endpoint_url else "auto"},
                max_pool_connections=max(10, cfg.max_concurrency),
            ),
        )
        self.transfer = TransferConfig(
            multipart_threshold=cfg.multipart_threshold_mb * MiB,
            multipart_chunksize=cfg.multipart_chunksize_mb * MiB,
            max_concurrency=cfg.max_concurrency,
        )

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key.strip('/')}" if self.prefix else key.strip("/")

    def put_file(self, src: Path | str, key: str) -> str:
        digest = file_digest(Path(src))
        self.client.upload_file(
            str(src), self.bucket, self._key(key), ExtraArgs={"Metadata": {"sha256": digest}}, Config=self.transfer
        )
        return digest

    def put_bytes(self, data: bytes, key: str) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, Metadata={"sha256": digest})
        return digest

    def stored_sha256(self, key: str) -> str:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as e:
            if e.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                raise FileNotFoundError(f"{self.uri}/{key}: no such object") from None
            raise
        if "sha256" not in head["Metadata"]:
            raise FileNotFoundError(f"{self.uri}/{key}: no stored sha256 (not written by the store)")
        return head["Metadata"]["sha256"]

    def get_file(self, key: str, dst: Path | str, sha256: str | None = None) -> Path:
        expected = sha256 or self.stored_sha256(key)
        dst = Path(dst)
        dst.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.tmp-", dir=dst.parent)
        os.close(fd)
        try:
            self.client.download_file(self.bucket, self._key(key), tmp, Config=self.transfer)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return verified_move(Path(tmp), dst, expected, f"{self.uri}/{key}")

    def get_bytes(self, key: str) -> bytes:
        from harnessrl.store import ChecksumError

        expected = self.stored_sha256(key)
        buf = io.BytesIO()  # download_fileobj, unlike a bare get_object, retries a body cut mid-stream
        self.client.download_fileobj(self.bucket, self._key(key), buf, Config=self.transfer)
        data = buf.getvalue()
        if hashlib.sha256(data).hexdigest() != expected:
            raise ChecksumError(f"{self.uri}/{key}: sha256 mismatch (stored {expected[:16]}…)")
        return data

    def exists(self, key: str) -> bool:
        try:
            self.stored_sha256(key)
        except FileNotFoundError:
            return False
        return True
