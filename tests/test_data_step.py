"""The DAG's data step (components/data.py) on each of its paths: a folder built here, a version pulled
from the DVC remote by md5 alone (S3 on loopback, as on a cluster), and a data config with no pushed
version, built and pushed. The step has no checkout, so none is given: only its inputs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from components.data import work
from harnessrl.config import StoreConfig, compose
from harnessrl.data.build import build
from harnessrl.data.md5 import dvc_dir_md5
from tests.s3_server import S3, s3  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore:_NoneStep.value:DeprecationWarning")  # dvc's, not ours
CFG = compose(["recipe=tiny_smoke"]).data


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(CFG, tmp_path_factory.mktemp("built") / "data")


@pytest.fixture(autouse=True)
def dvc_site_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "site-cache"))


def test_a_local_folder_is_copied_and_checked(built: Path, tmp_path: Path) -> None:
    out = tmp_path / "kfp" / "dataset"
    md5 = work(CFG, dvc_dir_md5(built), str(built), "", StoreConfig(), out)
    assert md5 == dvc_dir_md5(built) and tree(out) == tree(built)
    # The stages read the copy: rebuilding or deleting the checkout's folder cannot reach them.
    assert not any(a.samefile(b) for a, b in zip(sorted(out.rglob("*.py")), sorted(built.rglob("*.py")), strict=True))


def test_a_folder_that_changed_since_the_run_started_is_refused(built: Path, tmp_path: Path) -> None:
    changed = shutil.copytree(built, tmp_path / "changed")
    (changed / "prompts.jsonl").write_text("")
    out = tmp_path / "kfp" / "dataset"
    with pytest.raises(RuntimeError, match="changed since the run started"):
        work(CFG, dvc_dir_md5(built), str(changed), "", StoreConfig(), out)
    assert list(out.parent.iterdir()) == []  # no half-written artifact, no temp folder


def test_no_version_is_built_and_pushed_then_pulled_by_md5_through_s3(built: Path, tmp_path: Path, s3: S3) -> None:  # noqa: F811
    remote, store = f"s3://{s3.bucket}/dvc", StoreConfig(endpoint_url=s3.endpoint)
    first = tmp_path / "run1" / "dataset"
    md5 = work(CFG, "", "", remote, store, first)  # no pointer was pushed: build here, push
    assert md5 == dvc_dir_md5(built) and tree(first) == tree(built)  # the same bytes as a local build
    second = tmp_path / "run2" / "dataset"
    assert work(CFG, md5, "", remote, store, second) == md5  # the next run pulls what the first pushed
    assert tree(second) == tree(built)
    assert [p.name for p in (tmp_path / "run2").iterdir()] == ["dataset"]  # the scratch repo is gone


def test_a_version_the_remote_lacks_fails_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "kfp" / "dataset"
    missing = "0" * 32 + ".dir"
    with pytest.raises(FileNotFoundError, match=f"data version {missing} could not be pulled"):
        work(CFG, missing, "", str(tmp_path / "empty-remote"), StoreConfig(), out)
    assert list(out.parent.iterdir()) == []
