"""Real sources of code: find a `data.sources` entry's files, pin their version, copy them into the data folder.

A source is read once, at data-build time, into `repos/<split>/<name>/` of the data folder: that copy is
what tasks are mined from, what the CPT corpus reads, and what an episode's workspace starts from, so a
data version never depends on a checkout that may move later. What was read is pinned in
`sources.json`:
- a git checkout: the commit (`revision`, default HEAD), read with `git archive`, so uncommitted
  changes in the user's work tree never leak in and the clone is never touched;
- anything else (a plain directory, an installed package, an archive on the store): a tree hash, the
  sha256 of every copied file's path and content.

A source's dependency files at its root (requirements.txt, pyproject.toml) are always copied, whatever
its `include` says, unless `exclude` names them: its environment is built from them
(harnessrl/sources/envs.py), and recorded as the source's `env`.

A source whose root is a package (it has `__init__.py`) keeps its name as a folder, so its modules
import as they do where it came from (`email/utils.py` imports as `email.utils`).
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sysconfig
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from harnessrl.config import SourceConfig, StoreConfig
from harnessrl.harness.tools.files import SKIP_DIRS
from harnessrl.sources.envs import ENV_FILES, EnvInfo, is_env_file

# A source file bigger than this is data, not code a task could be about; it is left out of the copy.
MAX_FILE_BYTES = 256 << 10


class SourceError(ValueError):
    """A source cannot be read: the message names the source and the place."""


@dataclass(frozen=True)
class SourceInfo:
    """What `sources.json` records of one source."""

    name: str
    path: str  # as the config gave it
    split: str
    revision: str  # a git commit, or "tree:<sha256>" of the copied files
    license: str | None
    files: int
    bytes: int
    env: EnvInfo | None = None  # its environment, for a source with dependencies (harnessrl/sources/envs.py)


def root_of(cfg: SourceConfig) -> Path:
    """The local directory a `path` names (stdlib:NAME, site:NAME, or a directory)."""
    path = cfg.path or ""
    if path.startswith("stdlib:"):
        root = Path(sysconfig.get_paths()["stdlib"]) / path.removeprefix("stdlib:")
    elif path.startswith("site:"):
        name = path.removeprefix("site:")
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise SourceError(f"source {cfg.name!r}: {path}: no installed package named {name!r}")
        root = Path(next(iter(spec.submodule_search_locations)))
    else:
        root = Path(path).expanduser()
    if not root.is_dir() and root.with_suffix(".py").is_file():
        root = root.with_suffix(".py")  # a single-module source, e.g. stdlib:argparse
    if not root.exists():
        raise SourceError(f"source {cfg.name!r}: {root} does not exist")
    return root


def selected(rel: str, include: list[str], exclude: list[str]) -> bool:
    """Whether a file (a path relative to the source root) is part of the source. Globs match with
    fnmatch, where `*` also crosses folders; `**/x` matches x at the root too."""

    def match(pattern: str) -> bool:
        return fnmatch.fnmatch(rel, pattern) or (pattern.startswith("**/") and fnmatch.fnmatch(rel, pattern[3:]))

    parts = rel.split("/")
    if any(p in SKIP_DIRS or p.startswith(".") for p in parts[:-1]):
        return False
    return any(match(p) for p in include) and not any(match(p) for p in exclude)


def _git_revision(root: Path, revision: str | None, name: str) -> str | None:
    """The full commit a git checkout's `revision` (default HEAD) names; None if root is no checkout."""
    inside = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if inside.returncode != 0 or Path(inside.stdout.strip()).resolve() != root.resolve():
        if revision is not None:
            raise SourceError(f"source {name!r}: revision {revision!r} given, but {root} is not a git checkout's root")
        return None
    rev = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", f"{revision or 'HEAD'}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if rev.returncode != 0:
        raise SourceError(f"source {name!r}: {root} has no commit {revision or 'HEAD'!r}: {rev.stderr.strip()}")
    return rev.stdout.strip()


def _extract(archive: Path, dest: Path, where: str) -> None:
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")  # no absolute paths, links out, or devices
    except (tarfile.TarError, OSError) as e:
        raise SourceError(f"{where}: not a readable tar archive: {e}") from None


def _fetch_archive(cfg: SourceConfig, store: StoreConfig | None, dest: Path) -> None:
    """Download `s3://bucket/key.tar.gz` with the store's client settings and unpack it. A user's
    archive carries no checksum of ours: the tree hash of what it unpacks to pins the version."""
    from harnessrl.store.s3 import S3Store

    bucket, _, key = (cfg.path or "").removeprefix("s3://").partition("/")
    if not key:
        raise SourceError(f"source {cfg.name!r}: {cfg.path}: name an archive, s3://bucket/key.tar.gz")
    s3 = S3Store(bucket, "", store or StoreConfig())
    archive = dest.parent / f".{cfg.name}.archive"
    try:
        s3.client.download_file(bucket, key, str(archive), Config=s3.transfer)
    except Exception as e:  # the client's own errors name the bucket and key
        raise SourceError(f"source {cfg.name!r}: cannot read {cfg.path}: {e}") from None
    try:
        _extract(archive, dest, f"source {cfg.name!r}: {cfg.path}")
    finally:
        archive.unlink()


def copy_source(cfg: SourceConfig, dest: Path, store: StoreConfig | None = None) -> SourceInfo:
    """Copy a source's selected files into `dest` (which must not exist) and say what was copied."""
    with tempfile.TemporaryDirectory(prefix="source-") as scratch:
        if (cfg.path or "").startswith("s3://"):
            root = Path(scratch) / "tree"
            _fetch_archive(cfg, store, root)
            revision = None
        else:
            root = root_of(cfg)
            if root.is_file():  # one module: a folder of its own, so the same walk below reads it
                shutil.copyfile(root, Path(scratch) / root.name)
                root = Path(scratch)
            revision = _git_revision(root, cfg.revision, cfg.name)
            if revision is not None:
                # The commit's files, never the work tree's: uncommitted edits are not part of a version.
                tar = subprocess.run(["git", "-C", str(root), "archive", revision], capture_output=True)
                if tar.returncode != 0:
                    raise SourceError(f"source {cfg.name!r}: git archive {revision} failed: {tar.stderr.decode()}")
                root = Path(scratch) / "tree"
                (Path(scratch) / "commit.tar").write_bytes(tar.stdout)
                _extract(Path(scratch) / "commit.tar", root, f"source {cfg.name!r}")
        base = dest / root_of_package(root, cfg)
        digest, files, size = hashlib.sha256(), 0, 0
        for p in sorted(root.rglob("*")):
            rel = p.relative_to(root).as_posix()
            if p.is_symlink() or not p.is_file() or not selected(rel, [*cfg.include, *ENV_FILES], cfg.exclude):
                continue
            data = p.read_bytes()
            if len(data) > MAX_FILE_BYTES:
                continue
            target = dest / rel if is_env_file(rel) else base / rel  # dependency files: at the copy's root
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            digest.update(f"{rel}\0{hashlib.sha256(data).hexdigest()}\n".encode())
            files, size = files + 1, size + len(data)
    if not files:
        raise SourceError(f"source {cfg.name!r}: no files of {cfg.path} match include {cfg.include}")
    return SourceInfo(cfg.name, cfg.path or "", cfg.split, revision or f"tree:{digest.hexdigest()}", cfg.license,
                      files, size)  # fmt: skip


def root_of_package(root: Path, cfg: SourceConfig) -> str:
    """The folder a source's files go under inside its copy: the package's own name for a package
    root (so it imports by that name), else nothing."""
    if not (root / "__init__.py").is_file():
        return ""
    name = Path((cfg.path or "").split(":")[-1]).name.removesuffix(".tar.gz")
    return name if name.isidentifier() else cfg.name.replace("-", "_").replace(".", "_")


def write_sources(data_dir: Path, infos: list[SourceInfo]) -> None:
    (data_dir / "sources.json").write_text(json.dumps([asdict(i) for i in infos], indent=2, sort_keys=True) + "\n")


def read_sources(data_dir: Path) -> list[dict]:
    """What a data folder records of its sources; [] for a folder built before sources existed."""
    path = Path(data_dir) / "sources.json"
    return json.loads(path.read_text()) if path.is_file() else []
