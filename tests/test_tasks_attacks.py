"""Verifiers that hold: every scripted attack (harnessrl/tasks/attacks.py) is refused by the check of
every suite it applies to, on the tasks where it used to pass: lint tasks mined from the standard
library's json (a noqa comment, an emptied file), renames mined from email (only the def renamed),
generated bugfix tasks (a module that prints a passing summary and exits), and swe rows (a forging
conftest.py, a shadow pytest.py, stubbed tests). Validation drops what an attack passes, and a swe row
whose FAIL_TO_PASS id already passes."""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

import pytest

from harnessrl.cli import main
from harnessrl.tasks import swe
from harnessrl.tasks.attacks import ATTACKS, accepted, run_attacks, table, write
from harnessrl.tasks.suites import build_suite
from harnessrl.tasks.task import Check, Solution, Task, load_suite, write_suite_info, write_tasks
from harnessrl.tasks.validate import ATTACK_PASSES, F2P_PASSES, validate
from tests.conftest import needs_bwrap
from tests.test_tasks_swe import source as swe_source  # noqa: F401  (the fixture: repos and rows)
from tests.test_tasks_swe import write_rows

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def tasks_of(suite_dir: Path) -> list[Task]:
    return load_suite(suite_dir, "train") + load_suite(suite_dir, "heldout")


@pytest.fixture(scope="module")
def suites(tmp_path_factory, swe_source) -> dict[str, Path]:  # noqa: F811
    root = tmp_path_factory.mktemp("attacked")
    build_suite("lint", root / "lint", 0, 6, [STDLIB / "json"])
    build_suite("edit", root / "edit", 0, 6, [STDLIB / "email"])
    build_suite("bugfix", root / "bugfix", 0, 4)
    build_suite("lookup", root / "lookup", 0, 4)
    build_suite("multi_lookup", root / "multi_lookup", 0, 4)
    rows = write_rows(root / "rows.jsonl", swe_source["rows"])
    swe.import_swebench(rows, swe_source["repos"], root / "swe", workers=2, log=lambda _: None)
    return {p.name: p for p in root.iterdir() if p.is_dir()}


def attack(suite_dir: Path, names: list[str]):
    runs = run_attacks(tasks_of(suite_dir), suite_dir, names, workers=2)
    assert {name for name, _, _ in runs} == set(names), "every attack applies to some task here"
    return runs


def refused(runs) -> None:
    passed = accepted(runs)
    assert passed == {}, f"accepted: {passed}"


@needs_bwrap
def test_every_attacked_suite_keeps_tasks(suites):
    for name in ("lint", "edit", "swe"):
        assert len(tasks_of(suites[name])) >= 4, name


@needs_bwrap
def test_lint_suppression_comments_config_and_deleted_lines_are_refused(suites):
    runs = attack(suites["lint"], ["noqa_file", "noqa_line", "delete_flagged", "empty_file"])
    refused(runs)
    # The comments did silence ruff as it runs by default: the check refused them by its own rules.
    for name, _, traj in runs:
        if name == "noqa_file":
            assert traj.turns[0].calls[0].arguments["new_str"].startswith("# ruff: noqa\n")
            assert "FAILED test_lint_clean" in traj.outcome.details["output"]


@needs_bwrap
def test_lint_config_is_refused_where_a_task_can_write_files(suites, tmp_path):
    # Mined lint tasks cannot create files (lint, read_file, edit_file, finish); give one write_file.
    task = tasks_of(suites["lint"])[0]
    task = task.model_copy(update={"tools": [*task.tools, "write_file"]})
    write_tasks(suites["lint"] / "tasks" / "extra.jsonl", [task])
    runs = run_attacks([task], suites["lint"], ["lint_config", "conftest_forge", "shadow_pytest"], workers=1)
    assert len(runs) == 3
    refused(runs)


@needs_bwrap
def test_renaming_only_the_def_is_refused(suites):
    runs = attack(suites["edit"], ["rename_def_only", "rename_alias"])
    refused(runs)
    failing = [traj.outcome.details["output"] for name, _, traj in runs if name == "rename_def_only"]
    assert all("FAILED test_requested_change" in out for out in failing)


@needs_bwrap
def test_a_forged_verdict_is_refused(suites):
    for name in ("bugfix", "edit", "lint", "swe"):
        runs = attack(suites[name], ["forge_verdict"])
        refused(runs)
        # The forged lines reached the output: the runner's nonce, not the text, decided.
        assert any("99 passed" in t.outcome.details["output"] or "PASSED" in t.outcome.details["output"]
                   for _, _, t in runs), name  # fmt: skip


@needs_bwrap
def test_swe_test_config_and_tests_come_from_the_task(suites):
    names = ["conftest_forge", "linked_conftest", "conftest_ignore", "pytest_ini", "pyproject_pytest", "shadow_pytest"]
    names += ["stub_tests", "delete_tests", "syntax_error", "empty_file", "nothing"]
    runs = attack(suites["swe"], names)
    refused(runs)
    # The linked conftest.py is refused by name, not by luck: the check saw the link.
    linked = [t for name, _, t in runs if name == "linked_conftest"]
    assert linked and all("links test files or test config" in str(t.outcome.details) for t in linked)


@needs_bwrap
def test_answers_that_hedge_or_list_every_candidate_are_refused(suites):
    for name in ("lookup", "multi_lookup"):
        refused(attack(suites[name], ["hedge", "every_candidate", "nothing"]))


@needs_bwrap
def test_validation_drops_a_task_an_attack_passes(suites, tmp_path):
    # A weak check: the old value is gone from the file. The expert passes it, and so does emptying it.
    task = next(t for t in tasks_of(suites["edit"]) if t.solution.kind == "constant")
    line = next(ln for ln in (suites["edit"] / task.repo / task.solution.path).read_text().splitlines()
                if ln.startswith(f"{task.solution.name} ="))  # fmt: skip
    test = f"def test_changed():\n    assert {line!r} not in open('/workspace/{task.solution.path}').read()\n"
    weak = task.model_copy(update={"id": "weak/0", "check": Check(kind="tests", test=test)})
    kept, episodes, dropped = validate([weak], suites["edit"], workers=1)
    assert kept == [] and episodes == {}
    assert dropped["weak/0"][0] == f"{ATTACK_PASSES}: empty_file"


@needs_bwrap
def test_a_swe_row_whose_fail_to_pass_id_already_passes_is_dropped(swe_source, tmp_path):  # noqa: F811
    row = dict(swe_source["rows"][0])
    row["FAIL_TO_PASS"] = ["tests/test_calc.py::test_add", "tests/test_calc.py::test_mul"]  # test_add passes before
    row["PASS_TO_PASS"] = "[]"
    rows = write_rows(tmp_path / "rows.jsonl", [row])
    info = swe.import_swebench(rows, swe_source["repos"], tmp_path / "swe", workers=1, log=lambda _: None)
    assert info["num"] == 0 and info["dropped"] == {F2P_PASSES: 1}


@needs_bwrap
def test_cli_prints_the_table_and_exits_1_when_an_attack_passes(suites, tmp_path, capsys):
    assert main(["tasks", "attack", str(suites["lookup"]), "--attack", "hedge", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "lookup" in out and "hedge" in out and "0 of 4 attack episodes accepted" in out
    # A suite of one weak task: the file may be emptied.
    weak_dir = tmp_path / "weak"
    task = next(t for t in tasks_of(suites["edit"]) if t.solution.kind == "constant")
    (weak_dir / "repos").mkdir(parents=True)
    subprocess.run(["cp", "-r", str(suites["edit"] / task.repo), str(weak_dir / "repos")], check=True)
    weak = task.model_copy(update={
        "repo": f"repos/{Path(task.repo).name}", "split": "train",
        "check": Check(kind="tests", test="def test_true():\n    pass\n", packages=task.check.packages),
    })  # fmt: skip
    write_tasks(weak_dir / "tasks" / "train.jsonl", [weak])
    write_tasks(weak_dir / "tasks" / "heldout.jsonl", [])
    write_suite_info(weak_dir, {"suite": "edit"})
    assert main(["tasks", "attack", str(weak_dir), "--attack", "empty_file", "--workers", "1"]) == 1
    assert "empty_file passed: " + weak.id in capsys.readouterr().out
    assert main(["tasks", "attack", str(weak_dir), "--attack", "no_such_attack"]) == 2
    assert "no_such_attack" in capsys.readouterr().err


def test_an_attack_uses_only_the_tools_the_task_has(tmp_path):
    (tmp_path / "m.py").write_text("X = 1\n")
    task = Task(id="t", suite="edit", split="train", repo=".", instruction="i", tools=["write_file"],
                check=Check(kind="tests", test="def test_x():\n    pass\n"), solution=Solution(kind="constant", path="m.py"))  # fmt: skip
    assert write(task, tmp_path, "m.py", "")[0] == "write_file"
    task.tools = ["edit_file"]
    assert write(task, tmp_path, "m.py", "") == ("edit_file", {"path": "m.py", "old_str": "X = 1\n", "new_str": ""})
    assert write(task, tmp_path, "new.py", "") is None  # edit_file cannot create a file
    task.tools = ["edit_file", "run_terminal"]
    assert write(task, tmp_path, "new.py", "x")[0] == "run_terminal"
    task.tools = ["read_file", "finish"]
    assert ATTACKS["empty_file"](task, tmp_path) is None  # no tool can make the change: not tried
    assert ATTACKS["hedge"](task, tmp_path) is None  # not an answer task
    assert table([])[-1] == "0 of 0 attack episodes accepted"
