"""Data push/pull through DVC (local remote and S3 on loopback), and our md5 equal to DVC's own."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from unittest.mock import ANY

import boto3
import pytest
import yaml

from harnessrl.cli import main
from harnessrl.config import compose
from harnessrl.data import remote
from harnessrl.data.build import build, data_folder
from harnessrl.data.md5 import dvc_dir_md5
from tests.s3_server import S3, s3  # noqa: F401

# dvc 3.67 itself trips pygtrie's deprecation of `.value`; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:_NoneStep.value:DeprecationWarning")
SMOKE = ["recipe=tiny_smoke", "data.dir=data"]


def git_repo(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def dvc_add_md5(folder: Path, repo: Path) -> str:
    """What `dvc add` records for `folder` (copied into a fresh git+DVC repo): outs[0].md5."""
    from dvc.repo import Repo

    shutil.copytree(folder, git_repo(repo) / "data")
    os.environ.setdefault("DVC_SITE_CACHE_DIR", str(repo / ".dvc" / "tmp" / "site-cache"))
    Repo.init(str(repo)).close()
    with Repo(str(repo), config={"core": {"analytics": False}}) as r:
        r.add([str(repo / "data")])
    return yaml.safe_load((repo / "data.dvc").read_text())["outs"][0]["md5"]  # dvc add's own pointer


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def repo_with_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "site-cache"))
    repo = git_repo(tmp_path / "repo")
    build(compose(SMOKE).data, data_folder(compose(SMOKE).data, repo))
    return repo


def smoke_folder(repo: Path) -> Path:
    return data_folder(compose(SMOKE).data, repo)


def test_our_dir_md5_is_what_dvc_add_records(tmp_path: Path, repo_with_data: Path) -> None:
    odd = tmp_path / "odd"
    (odd / "a" / "b").mkdir(parents=True)
    (odd / "crlf.txt").write_bytes(b"line\r\nline\r\n")  # DVC 3 hashes bytes as they are (no dos2unix)
    (odd / "empty").write_bytes(b"")
    (odd / "a" / "b" / "ünï cödé.py").write_text("x = 1\n")
    (odd / "a" / "z.bin").write_bytes(bytes(range(256)) * 40)
    (odd / "a-b").write_text("sorts between a/ and a/b in some orders\n")
    assert dvc_dir_md5(odd) == dvc_add_md5(odd, tmp_path / "r1")
    data = smoke_folder(repo_with_data)
    assert dvc_dir_md5(data) == dvc_add_md5(data, tmp_path / "r2")


def test_push_then_pull_from_a_local_remote_restores_identical_bytes(
    repo_with_data: Path, capsys: pytest.CaptureFixture
) -> None:
    repo, data = repo_with_data, smoke_folder(repo_with_data)
    before, md5 = tree(data), dvc_dir_md5(data)
    assert main(["data", "push", "--repo", str(repo), *SMOKE]) == 0
    assert f"md5 {md5}" in capsys.readouterr().out
    pointer = data.with_name(data.name + ".dvc")  # next to the folder, where git tracks it
    assert yaml.safe_load(pointer.read_text())["outs"][0] == {"md5": md5, "size": ANY, "nfiles": len(before),
                                                               "hash": "md5", "path": data.name}  # fmt: skip
    assert (repo / "runs" / "dvc-remote" / "files" / "md5").is_dir()
    assert "analytics = False" in (repo / ".dvc" / "config").read_text()
    shutil.rmtree(data)
    shutil.rmtree(repo / ".dvc" / "cache")
    assert main(["data", "pull", "--repo", str(repo), *SMOKE]) == 0
    assert f"md5 {md5} verified" in capsys.readouterr().out
    assert tree(data) == before


def test_push_then_pull_through_s3_restores_identical_bytes(repo_with_data: Path, s3: S3, capsys) -> None:  # noqa: F811
    repo, data = repo_with_data, smoke_folder(repo_with_data)
    before = tree(data)
    remote = ["--remote", f"s3://{s3.bucket}/dvc", "--endpoint-url", s3.endpoint]
    assert main(["data", "push", "--repo", str(repo), *remote, *SMOKE]) == 0
    keys = boto3.client("s3", endpoint_url=s3.endpoint).list_objects_v2(Bucket=s3.bucket, Prefix="dvc/files/md5/")
    distinct = {hashlib.md5(b).hexdigest() for b in before.values()}
    assert keys["KeyCount"] == len(distinct) + 1  # every distinct file, and the .dir listing
    shutil.rmtree(data)
    shutil.rmtree(repo / ".dvc" / "cache")
    assert main(["data", "pull", "--repo", str(repo), *remote, *SMOKE]) == 0
    assert tree(data) == before
    assert not (repo / "runs").exists(), "the S3 remote, not the default local one, was used"
    capsys.readouterr()


def test_the_default_recipes_pointer_is_the_roots_data_dvc(repo_with_data: Path) -> None:
    repo, data = repo_with_data, smoke_folder(repo_with_data)
    before, store = tree(data), compose(SMOKE).store
    url = str(repo / "runs" / "dvc-remote")
    r = remote.push(repo, data, url, store, at_root=True)
    pointer = yaml.safe_load((repo / "data.dvc").read_text())["outs"][0]
    assert pointer["path"] == data.relative_to(repo).as_posix() and pointer["md5"] == r["md5"]
    assert not data.with_name(data.name + ".dvc").exists()  # one pointer, at the root
    assert remote.dvc_file(data, repo) == repo / "data.dvc"
    shutil.rmtree(data)
    shutil.rmtree(repo / ".dvc" / "cache")
    assert remote.pull(repo, data, url, store)["md5"] == r["md5"]
    assert tree(data) == before
    # A rebuilt folder (same name, new bytes) pushes again through the same root pointer.
    (data / "extra.txt").write_text("rebuilt\n")
    again = remote.push(repo, data, url, store, at_root=True)
    assert (
        again["md5"] != r["md5"] and yaml.safe_load((repo / "data.dvc").read_text())["outs"][0]["md5"] == again["md5"]
    )
    assert not data.with_name(data.name + ".dvc").exists()


def test_pull_without_data_dvc_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    repo = git_repo(tmp_path / "empty")
    assert main(["data", "pull", "--repo", str(repo), *SMOKE]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{smoke_folder(repo).name}.dvc: not found" in err


def test_build_push_builds_then_pushes_in_one_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "site-cache"))
    repo = git_repo(tmp_path / "repo")
    assert main(["data", "build", "--push", "--repo", str(repo), *SMOKE]) == 0
    folder = smoke_folder(repo)
    out = capsys.readouterr().out
    assert f"built {folder}" in out and f"pushed {folder}" in out
    assert yaml.safe_load(folder.with_name(folder.name + ".dvc").read_text())["outs"][0]["md5"] == dvc_dir_md5(folder)
    assert main(["data", "build", "--push", "-o", str(tmp_path / "x"), *SMOKE]) == 2
