"""`harnessrl eval` outside a run on a real checkpoint, its determinism, and its errors (exit 2,
naming the path or flag); held-out suites from a data folder or a `tasks build` suite directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnessrl.config import EvalConfig
from harnessrl.report.episodes import checkpoint_rows
from harnessrl.report.heldout import load_heldout
from harnessrl.report.metrics import suite_metrics
from harnessrl.tasks.suites import build_suite
from harnessrl.tasks.task import TaskFileError
from tests.conftest import run_cli


def test_the_same_seeds_give_the_same_numbers(tiny_base: dict) -> None:
    """Sampled (T=1), two seeds: every episode and so every metric but wall time repeats exactly."""
    cfg = EvalConfig(mix={"lookup": 1.0}, seeds=[0, 1], num_tasks=2, max_new_tokens=8, max_turns=2, temperature=1.0)
    tasks = load_heldout(tiny_base["data"], cfg.mix, cfg.num_tasks)
    first, again = (checkpoint_rows(tiny_base["base"], tasks, tiny_base["data"], cfg, "float32") for _ in range(2))
    strip = lambda rows: [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]
    # Two tasks from each source of the suite: the generated repos and the held-out real one (hydra).
    assert strip(first) == strip(again) and len(first) == 8
    assert [r["seed"] for r in first] == [0] * 4 + [1] * 4
    assert [r["suite"] for r in first[:4]] == ["lookup", "lookup", "lookup@hydra", "lookup@hydra"]
    m = suite_metrics(first, with_pass_at_k=True)
    assert m["pass_at_k"]["k"] == 2 and m == suite_metrics(again, with_pass_at_k=True) | {"wall_s": m["wall_s"]}


def test_eval_a_checkpoint_on_a_suite_built_by_tasks_build(tiny_base: dict, tmp_path: Path, capsys) -> None:
    suite = tmp_path / "edit"
    build_suite("edit", suite, seed=0, num=8)
    out = tmp_path / "out"
    args = ["--suite", "edit", "--num-tasks", "2", "--max-turns", "1", "--max-new-tokens", "8", "-o", str(out)]
    assert run_cli("eval", "--checkpoint", str(tiny_base["base"]), "--data", str(suite), *args) == 0
    report = json.loads((out / "report.json").read_text())
    base_id = json.loads((tiny_base["base"] / "manifest.json").read_text())["id"]
    (result,) = report["results"]
    assert result["stage"] == "base" and result["checkpoint"] == base_id
    assert result["suites"]["edit"]["episodes"] == 2 and report["data"] == str(suite)
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 2
    assert "edit: 2 episodes  success 0.000" in capsys.readouterr().out


def test_without_data_the_checkpoint_manifest_names_its_data_folder(tiny_base: dict, tmp_path: Path) -> None:
    args = ["--suite", "lookup", "--num-tasks", "1", "--max-turns", "1", "--max-new-tokens", "4"]
    assert run_cli("eval", "--checkpoint", str(tiny_base["base"]), *args, "-o", str(tmp_path / "o")) == 0
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert Path(report["data"]).resolve() == Path(tiny_base["data"]).resolve()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--checkpoint", "/no/such/ckpt", "--suite", "lookup"], "--checkpoint /no/such/ckpt: not a directory"),
        (
            ["--checkpoint", "{base}", "--suite", "bugfix"],
            "no held-out tasks of suite 'bugfix' (suites here: long_horizon, lookup, multi_lookup)",
        ),
        (["--checkpoint", "{base}", "--suite", "lookup", "--data", "/no/data"], "--data: /no/data: no held-out tasks"),
        (["--checkpoint", "{base}", "--suite", "lookup", "--num-tasks", "0"], "--num-tasks: Input should be greater"),
        (["--checkpoint", "{data}", "--suite", "lookup", "--data", "{data}"], "not a Hugging Face checkpoint"),
        (["--endpoint", "http://127.0.0.1:9/v1", "--suite", "lookup"], "--endpoint: http://127.0.0.1:9/v1/models"),
    ],
)
def test_bad_input_exits_2_naming_what_is_wrong(tiny_base: dict, capsys, args: list[str], says: str) -> None:
    args = [a.format(base=tiny_base["base"], data=tiny_base["data"]) for a in args]
    assert run_cli("eval", *args, "-o", "/tmp/never-written") == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
    assert not Path("/tmp/never-written").exists()


def test_bad_task_rows_name_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "heldout.jsonl").write_text('{"task": {"id": "x"}}\n')
    with pytest.raises(TaskFileError, match=r"heldout.jsonl:1: field 'task.suite'"):
        load_heldout(tmp_path, {"lookup": 1.0}, 1)


def test_report_of_a_folder_that_is_not_a_run_exits_2(tmp_path: Path, capsys) -> None:
    assert run_cli("report", str(tmp_path)) == 2
    assert "not a harnessrl run directory" in capsys.readouterr().err
