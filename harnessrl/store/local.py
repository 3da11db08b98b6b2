"""The local store: a directory tree, each file with a hidden `.<name>.sha256` sidecar.

Writes copy to a temp sibling and rename (harnessrl.io's rule), so the default store has the same
guarantees as S3 with nothing to set up; a shared filesystem (NFS, a PVC) works the same way.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from harnessrl.io import atomic_write_text, file_digest


class LocalStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).expanduser().resolve()
        self.uri = str(self.root)

    def _path(self, key: str) -> Path:
        path = (self.root / key.strip("/")).resolve()
        if not path.is_relative_to(self.root):
            raise ValueError(f"{key}: key leaves the store root {self.root}")
        return path

    @staticmethod
    def _sidecar(path: Path) -> Path:
        return path.with_name(f".{path.name}.sha256")

    def put_file(self, src: Path | str, key: str) -> str:
        return self._put(key, lambda tmp: shutil.copyfile(src, tmp))

    def put_bytes(self, data: bytes, key: str) -> str:
        return self._put(key, lambda tmp: Path(tmp).write_bytes(data))

    def _put(self, key: str, write) -> str:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
        os.close(fd)
        try:
            write(tmp)
            digest = file_digest(Path(tmp))
            # Sidecar first: a file with a stale sidecar fails its check; a file without one is not there yet.
            atomic_write_text(self._sidecar(path), digest + "\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return digest

    def stored_sha256(self, key: str) -> str:
        path = self._path(key)
        if not path.is_file():
            raise FileNotFoundError(f"{self.uri}/{key}: no such object")
        sidecar = self._sidecar(path)
        if not sidecar.is_file():
            raise FileNotFoundError(f"{self.uri}/{key}: no stored sha256 (not written by the store)")
        return sidecar.read_text().strip()

    def get_file(self, key: str, dst: Path | str, sha256: str | None = None) -> Path:
        from harnessrl.store.verify import verified_move

        expected = sha256 or self.stored_sha256(key)
        dst = Path(dst)
        dst.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.tmp-", dir=dst.parent)
        os.close(fd)
        try:
            shutil.copyfile(self._path(key), tmp)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return verified_move(Path(tmp), dst, expected, f"{self.uri}/{key}")

    def get_bytes(self, key: str) -> bytes:
        from harnessrl.store import ChecksumError

        expected = self.stored_sha256(key)
        data = self._path(key).read_bytes()
        if hashlib.sha256(data).hexdigest() != expected:
            raise ChecksumError(f"{self.uri}/{key}: sha256 mismatch (stored {expected[:12]}…)")
        return data

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()
