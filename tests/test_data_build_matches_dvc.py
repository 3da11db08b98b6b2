"""`harnessrl data build` is deterministic: the default recipe's data has exactly the md5 its DVC pointer
(the repo root's data.dvc, tracked by git) records."""

from __future__ import annotations

from pathlib import Path

import yaml

from harnessrl.config import compose
from harnessrl.data.build import folder_name
from harnessrl.data.md5 import dvc_dir_md5

REPO = Path(__file__).resolve().parent.parent


def test_built_data_md5_equals_its_pointer(default_data: Path) -> None:
    name = folder_name(compose([]).data)
    pointer = REPO / "data.dvc"  # the default recipe's pointer sits at the repo root
    assert pointer.is_file(), f"{pointer} missing: `harnessrl data push` (default recipe) writes it"
    recorded = yaml.safe_load(pointer.read_text())["outs"][0]
    out = default_data  # built by `harnessrl.data.build.build` from the default config (conftest)
    assert recorded["path"] == f"data/{name}", "the default data config changed; `harnessrl data push` bumps data.dvc"
    assert out.name == name
    assert dvc_dir_md5(out) == recorded["md5"], f"data build changed: rebuild and `harnessrl data push` to bump {name}"
    assert sum(1 for p in out.rglob("*") if p.is_file()) == recorded["nfiles"]
