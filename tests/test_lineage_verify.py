"""`lineage verify`: every hash along the chain recomputed; the first mismatch named, exit 1."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from harnessrl.cli import main
from harnessrl.data.md5 import dvc_dir_md5
from harnessrl.lineage.manifest import MANIFEST, write_manifest

STAGES = ("base", "cpt", "rl")


def make_data(root: Path) -> Path:
    (root / "repos" / "r0").mkdir(parents=True)
    (root / "repos" / "r0" / "m.py").write_text("X = 1\n")
    (root / "prompts.jsonl").write_text('{"q": 1}\n')
    return root


def make_chain(root: Path, data: Path, lr: float = 1e-3, salt: bytes = b"") -> list[Path]:
    """base -> cpt -> rl, each a folder of fake weights (`salt` makes them differ) with a real manifest."""
    out, parent = [], None
    for i, stage in enumerate(STAGES):
        ckpt = root / stage
        ckpt.mkdir(parents=True)
        (ckpt / "model.safetensors").write_bytes(salt + bytes([i]) * 4096)
        (ckpt / "config.json").write_text(json.dumps({"layers": 2}))
        if stage == "rl":
            (ckpt / "metrics.jsonl").write_text('{"step": 1, "policy_version": 1}\n{"step": 2, "policy_version": 2}\n')
        config = {"seed": 0, "model": {"hidden": 128}, "stage": {"lr": lr * (i + 1), "world_size": 2}}
        write_manifest(
            ckpt,
            stage=stage,
            config=config,
            parent=parent,
            data_md5=dvc_dir_md5(data),
            data_dir=data,
            metrics={"loss": 1.0 / (i + 1)},
            started=time.time(),
            seed=0,
        )
        out.append(ckpt)
        parent = ckpt
    return out


@pytest.fixture
def chain3(tmp_path: Path) -> list[Path]:
    return make_chain(tmp_path / "ckpts", make_data(tmp_path / "data"))


def verify(ckpt: Path, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    rc = main(["lineage", "verify", str(ckpt)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_an_untouched_chain_verifies(chain3: list[Path], capsys: pytest.CaptureFixture) -> None:
    rc, out, err = verify(chain3[-1], capsys)
    assert rc == 0, err
    # Every checkpoint: seal, config, weights, data, and a parent link for all but base.
    assert out.count("ok    rl ") == 5 and out.count("ok    cpt ") == 5 and out.count("ok    base ") == 4
    assert "verified: 14 checks passed, 0 skipped" in out


def test_changed_weights_are_named_at_the_checkpoint_that_changed(
    chain3: list[Path], capsys: pytest.CaptureFixture
) -> None:
    (chain3[1] / "model.safetensors").write_bytes(b"\x00" * 4096)  # cpt, the middle of the chain
    rc, out, err = verify(chain3[-1], capsys)
    assert rc == 1
    assert err.startswith(f"harnessrl: verify failed: cpt at {chain3[1]}: weights changed: id ")
    assert "base" not in out, "the walk stops at the first mismatch"


def test_an_edited_manifest_is_detected_by_its_seal(chain3: list[Path], capsys: pytest.CaptureFixture) -> None:
    m = json.loads((chain3[-1] / MANIFEST).read_text())
    m["metrics"]["loss"] = 0.001  # a nicer number, written by hand
    (chain3[-1] / MANIFEST).write_text(json.dumps(m))
    rc, _, err = verify(chain3[-1], capsys)
    assert rc == 1 and "rl at" in err and "manifest edited: seal" in err


def test_a_missing_parent_fails(chain3: list[Path], capsys: pytest.CaptureFixture) -> None:
    import shutil

    shutil.rmtree(chain3[0])
    rc, _, err = verify(chain3[-1], capsys)
    assert rc == 1 and "cpt at" in err and "parent missing:" in err


def test_a_replaced_parent_fails(chain3: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # Another, internally consistent checkpoint put where cpt's parent used to be.
    import shutil

    other = make_chain(tmp_path / "other", make_data(tmp_path / "data2"), lr=0.5)
    shutil.rmtree(chain3[0])
    shutil.copytree(other[1], chain3[0])
    rc, _, err = verify(chain3[-1], capsys)
    assert rc == 1 and "cpt at" in err and "parent replaced: recorded" in err


def test_changed_data_fails_and_absent_data_is_skipped(
    chain3: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "data" / "prompts.jsonl").write_text('{"q": 2}\n')
    rc, _, err = verify(chain3[-1], capsys)
    assert rc == 1 and "rl at" in err and "data:data changed: recorded" in err
    (tmp_path / "data").rename(tmp_path / "elsewhere")
    rc, out, _ = verify(chain3[-1], capsys)
    assert rc == 0 and "skip  rl           data:data" in out and "3 skipped" in out


def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc, out, err = verify(tmp_path / "nope", capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1 and "not a harnessrl checkpoint" in err
