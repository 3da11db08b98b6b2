"""`harnessrl data build` is deterministic: the default recipe's data has exactly the md5 in data.dvc."""

from __future__ import annotations

from pathlib import Path

import yaml

from harnessrl.data.md5 import dvc_dir_md5

REPO = Path(__file__).resolve().parent.parent


def test_built_data_md5_equals_data_dvc(default_data: Path) -> None:
    recorded = yaml.safe_load((REPO / "data.dvc").read_text())["outs"][0]
    out = default_data  # built by `harnessrl.data.build.build` from the default config (conftest)
    assert recorded["path"] == "data"
    assert dvc_dir_md5(out) == recorded["md5"], "data build changed: rebuild and `harnessrl data push` to bump data.dvc"
    assert sum(1 for p in out.rglob("*") if p.is_file()) == recorded["nfiles"]
