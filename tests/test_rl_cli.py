"""`harnessrl rl`: the RL stage alone on a checkpoint, with a manifest whose parent is that checkpoint."""

from __future__ import annotations

from pathlib import Path

from harnessrl.lineage.manifest import read_manifest
from harnessrl.metrics import read_metrics
from tests.conftest import SMOKE, needs_bwrap, run_cli


@needs_bwrap
def test_rl_cli_trains_a_checkpoint_and_records_its_parent(tiny_base: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "rl"
    args = ["rl", "--checkpoint", str(tiny_base["base"]), "--data", str(tiny_base["data"]), "-o", str(out)]
    assert run_cli(*args, *SMOKE, "stages.rl.steps=1") == 0
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1]
    m = read_manifest(out)
    assert m["stage"] == "rl" and m["parent"]["path"] == str(tiny_base["base"].resolve())


def test_rl_cli_names_bad_input(tmp_path: Path, capsys) -> None:
    assert run_cli("rl", "--checkpoint", str(tmp_path)) == 2
    assert "not a Hugging Face checkpoint" in capsys.readouterr().err
    assert run_cli("rl", "--checkpoint", str(tmp_path), "stages.rl.lr=-1") == 2
    assert "stages.rl.lr" in capsys.readouterr().err
