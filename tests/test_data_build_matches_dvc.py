"""`harnessrl data build` is deterministic: the default recipe's data has exactly the md5 its DVC pointer
(data/<name>-<config hash>.dvc, tracked by git) records."""

from __future__ import annotations

from pathlib import Path

import yaml

from harnessrl.config import compose
from harnessrl.data.build import folder_name
from harnessrl.data.md5 import dvc_dir_md5

REPO = Path(__file__).resolve().parent.parent


def test_built_data_md5_equals_its_pointer(default_data: Path) -> None:
    name = folder_name(compose([]).data)
    pointer = REPO / "data" / f"{name}.dvc"
    assert pointer.is_file(), f"{pointer} missing: the default data config changed; `harnessrl data push` writes it"
    recorded = yaml.safe_load(pointer.read_text())["outs"][0]
    out = default_data  # built by `harnessrl.data.build.build` from the default config (conftest)
    assert recorded["path"] == name == out.name
    assert dvc_dir_md5(out) == recorded["md5"], f"data build changed: rebuild and `harnessrl data push` to bump {name}"
    assert sum(1 for p in out.rglob("*") if p.is_file()) == recorded["nfiles"]
