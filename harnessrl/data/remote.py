"""`harnessrl data push` / `data pull`: a data folder to and from a DVC remote.

Through DVC's Python API (`dvc.repo.Repo`, the same calls its CLI makes). The remote is passed
as config when the repo is opened, never written to `.dvc/config`, so a local directory (the
default) or S3 (dvc-s3, with an endpoint for S3-compatible servers) is chosen per call from the
recipe's `store` config. DVC's site cache (by default under /var/tmp) goes under `.dvc/tmp`, and
its analytics are off.

Push runs `dvc add` first, so the folder's pointer (`data/<folder>.dvc`, harnessrl.data.build) always
records what went up; pull ends by checking the folder's md5 (harnessrl.data.md5, the same number DVC
records) against the pointer. The pipeline's data step (components/data.py) has no checkout: it
pulls a version by its md5 alone (`pull_version`), through a scratch repo of its own.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from harnessrl.config import StoreConfig
from harnessrl.data.md5 import dvc_dir_md5
from harnessrl.io import atomic_dir

REMOTE = "harnessrl"


def remote_section(url: str, root: Path, cfg: StoreConfig) -> dict:
    """DVC's `remote "<name>"` section for a local directory or an s3:// URL."""
    if not url.startswith("s3://"):
        path = Path(url) if Path(url).is_absolute() else root / url
        return {"url": str(path)}
    section = {"url": url}
    if cfg.endpoint_url:
        section["endpointurl"] = cfg.endpoint_url
    if cfg.region:
        section["region"] = cfg.region
    return section


@contextmanager
def open_repo(root: Path, url: str, cfg: StoreConfig) -> Iterator:
    """The DVC repo at `root` (initialized on first use) with our remote as its default."""
    from dvc.repo import Repo

    site_cache = root / ".dvc" / "tmp" / "site-cache"
    old = os.environ.get("DVC_SITE_CACHE_DIR")
    # Repo.init opens the repo before any config of ours applies: point its site cache here too.
    os.environ["DVC_SITE_CACHE_DIR"] = str(site_cache)
    try:
        if not (root / ".dvc").is_dir():
            Repo.init(str(root), no_scm=not (root / ".git").exists()).close()
            with Repo(str(root)) as repo, repo.config.edit() as conf:
                conf["core"]["analytics"] = False
        config = {
            "core": {"remote": REMOTE, "analytics": False, "site_cache_dir": str(site_cache)},
            "remote": {REMOTE: remote_section(url, root, cfg)},
        }
        with Repo(str(root), config=config) as repo:
            yield repo
    finally:
        if old is None:
            os.environ.pop("DVC_SITE_CACHE_DIR", None)
        else:
            os.environ["DVC_SITE_CACHE_DIR"] = old


ROOT_POINTER = "data.dvc"  # at the repo root: the default recipe's data folder


def dvc_file(data_dir: Path, root: Path | None = None) -> Path:
    """A data folder's DVC pointer: the repo root's `data.dvc` where it names this folder (the
    default recipe's data), else `<folder>.dvc` beside the folder."""
    if root is not None and (root / ROOT_POINTER).is_file():
        outs = yaml.safe_load((root / ROOT_POINTER).read_text()).get("outs") or [{}]
        if (root / outs[0].get("path", "")).resolve() == Path(data_dir).resolve():
            return root / ROOT_POINTER
    return data_dir.with_name(data_dir.name + ".dvc")


def recorded_md5(data_dir: Path, root: Path | None = None) -> str:
    path = dvc_file(data_dir, root)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: not found; run `harnessrl data push` (with the same recipe and "
            "overrides) where the data was built"
        )
    return yaml.safe_load(path.read_text())["outs"][0]["md5"]


def _inside(root: Path, data_dir: Path) -> Path:
    root, data_dir = root.resolve(), (data_dir if data_dir.is_absolute() else root / data_dir).resolve()
    if not data_dir.is_relative_to(root):
        raise ValueError(f"{data_dir}: the data folder must be inside the repo {root}")
    return data_dir


def push(root: Path, data_dir: Path, url: str, cfg: StoreConfig, at_root: bool = False) -> dict:
    """`dvc add` the data folder (updating its pointer) and push its files; returns md5 and counts.
    `at_root`: the pointer is the repo root's `data.dvc` (the default recipe's data), whose `path`
    names the folder below it."""
    data_dir = _inside(root, data_dir)
    root = root.resolve()
    if not data_dir.is_dir():
        raise FileNotFoundError(f"{data_dir}: no data folder; build it with `harnessrl data build`")
    with open_repo(root, url, cfg) as repo:
        repo.add([str(data_dir)])
        beside = data_dir.with_name(data_dir.name + ".dvc")
        # dvc add writes a new pointer beside the folder: move it up, its path made relative. A pointer
        # that already tracks the folder (a rebuild) is updated where it is.
        if at_root and beside.is_file():
            pointer = yaml.safe_load(beside.read_text())
            pointer["outs"][0]["path"] = data_dir.relative_to(root).as_posix()
            (root / ROOT_POINTER).write_text(yaml.safe_dump(pointer, sort_keys=False))
            beside.unlink()
        pushed = repo.push(targets=[str(dvc_file(data_dir, root))])
    md5 = recorded_md5(data_dir, root)
    ours = dvc_dir_md5(data_dir)
    if ours != md5:  # our cache keys must be DVC's md5s; a mismatch is a bug in data/md5.py
        raise RuntimeError(f"{data_dir}: dvc recorded {md5}, harnessrl.data.md5 computes {ours}")
    return {"md5": md5, "pushed": pushed, "remote": remote_section(url, root.resolve(), cfg)["url"]}


def pull(root: Path, data_dir: Path, url: str, cfg: StoreConfig) -> dict:
    """Fetch the files the folder's pointer names and check the folder out; verifies its md5."""
    data_dir = _inside(root, data_dir)
    md5 = recorded_md5(data_dir, root.resolve())
    pointer = dvc_file(data_dir, root.resolve())
    with open_repo(root.resolve(), url, cfg) as repo:
        stats = repo.pull(targets=[str(pointer)], force=True)
    got = dvc_dir_md5(data_dir)
    if got != md5:
        raise RuntimeError(f"{data_dir}: after pull md5 is {got}, {pointer.name} records {md5}")
    return {
        "md5": md5,
        "fetched": stats.get("stats", {}).get("fetched", 0),
        "remote": remote_section(url, root.resolve(), cfg)["url"],
    }


def pull_version(md5: str, url: str, cfg: StoreConfig, out: Path) -> dict:
    """Fetch the data folder whose DVC md5 is `md5` into `out`, with no checkout and no pointer file:
    a scratch DVC repo beside `out` gets a pointer written for that md5, pulls, and is removed. `out`
    appears whole or not at all."""
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.pull-", dir=out.parent))
    try:
        (scratch / "data.dvc").write_text(yaml.safe_dump({"outs": [{"md5": md5, "hash": "md5", "path": "data"}]}))
        with open_repo(scratch, url, cfg) as repo:
            try:
                stats = repo.pull(targets=[str(scratch / "data.dvc")])
            except Exception as e:  # DVC's own errors name the missing objects; say which version
                raise FileNotFoundError(f"data version {md5} could not be pulled from {url}: {e}") from e
        got = dvc_dir_md5(scratch / "data")
        if got != md5:
            raise RuntimeError(f"data version {md5} pulled from {url} hashes to {got}")
        with atomic_dir(out) as tmp:
            tmp.rmdir()
            os.replace(scratch / "data", tmp)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"md5": md5, "fetched": stats.get("stats", {}).get("fetched", 0), "remote": url}
