"""`harnessrl tasks import --format swebench`: rows in the SWE-bench schema, made here from real commits of
small local git repositories, become a validated swe suite the expert solves and an empty patch fails."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from harnessrl.cli import main
from harnessrl.harness.sandbox import create_workspace, remove_workspace
from harnessrl.tasks import swe
from harnessrl.tasks.checkers import make_checker
from harnessrl.tasks.diffs import Hunk, hunk_edit, parse_patch
from harnessrl.tasks.expert import expert_trajectories
from harnessrl.tasks.task import TaskFileError, load_suite
from harnessrl.tasks.validate import EXPERT_FAILS, SNAPSHOT_PASSES
from tests.conftest import needs_bwrap  # fails under CI rather than skipping

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}

# A long head: read_file truncates the module, so the expert reads it page by page.
FILLER = "".join(f"# filler line {i}: nothing to see here, keep reading\n" for i in range(400))
CALC_V0 = (
    FILLER
    + """
def add(a, b):
    return a + b


def mul(a, b):
    return a + b


def clamp(x, lo, hi):
    if x < lo:
        return x
    if x > hi:
        return x
    return x
"""
)
CALC_V1 = CALC_V0.replace("def mul(a, b):\n    return a + b", "def mul(a, b):\n    return a * b")
CALC_V2 = CALC_V1.replace("< lo:\n        return x", "< lo:\n        return lo").replace(
    "> hi:\n        return x", "> hi:\n        return hi"
)
TESTS_V0 = "from calcpkg.calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
TESTS_V1 = TESTS_V0.replace("import add", "import add, mul") + "\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
CLAMP_TESTS = (
    "from calcpkg.calc import clamp\n\n\ndef test_clamp_low():\n    assert clamp(-5, 0, 9) == 0\n\n\n"
    "def test_clamp_high():\n    assert clamp(50, 0, 9) == 9\n\n\ndef test_clamp_inside():\n    assert clamp(4, 0, 9) == 4\n"
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=ENV, check=True, capture_output=True, text=True).stdout


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def row(repo: Path, name: str, iid: str, base: str, fix: str, f2p: list, p2p: list, context: int = 3) -> dict:
    """A SWE-bench row from the commit `fix` on top of `base`: source diff as patch, tests diff as test_patch."""
    diff = lambda *paths: git(repo, "diff", f"-U{context}", base, fix, "--", *paths)
    return {
        "instance_id": iid,
        "repo": name,
        "base_commit": base,
        "problem_statement": f"Issue {iid}: please fix it.",
        "patch": diff(".", ":(exclude)tests"),
        "test_patch": diff("tests"),
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": json.dumps(p2p),  # as SWE-bench ships it: a JSON string
        "version": "1.0",  # extra columns are ignored
    }


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> dict:
    """Two repos under one --repos dir (DIR/acme/calc and DIR/words) and four rows from real commits."""
    repos = tmp_path_factory.mktemp("repos")
    calc = repos / "acme" / "calc"
    calc.mkdir(parents=True)
    git(calc, "init", "-q")
    c0 = commit(calc, {"calcpkg/__init__.py": "", "calcpkg/calc.py": CALC_V0, "tests/test_calc.py": TESTS_V0}, "c0")
    c1 = commit(calc, {"calcpkg/calc.py": CALC_V1, "tests/test_calc.py": TESTS_V1}, "fix mul")
    c2 = commit(calc, {"calcpkg/calc.py": CALC_V2, "tests/test_clamp.py": CLAMP_TESTS}, "fix clamp")
    text = 'def shout(s):\n    return s.upper() + "!"\n'
    c3 = commit(
        calc,
        {
            "calcpkg/text.py": text,
            "calcpkg/__init__.py": "from calcpkg.text import shout\n",
            "tests/test_text.py": "from calcpkg import shout\n\n\ndef test_shout():\n    assert shout('a') == 'A!'\n",
        },
        "add shout",
    )
    words = repos / "words"
    words.mkdir()
    git(words, "init", "-q")
    w0 = commit(
        words,
        {"words.py": "def count(s):\n    return len(s)\n", "tests/test_words.py": "def test_nothing():\n    pass\n"},
        "w0",
    )
    w1 = commit(
        words,
        {
            "words.py": "def count(s):\n    return len(s.split())\n",
            "tests/test_words.py": "from words import count\n\n\ndef test_nothing():\n    pass\n\n\n"
            "def test_count():\n    assert count('a b c') == 3\n",
        },
        "count words",
    )
    add, mul = "tests/test_calc.py::test_add", "tests/test_calc.py::test_mul"
    clamp = [f"tests/test_clamp.py::test_clamp_{k}" for k in ("low", "high")]
    rows = [
        row(calc, "acme/calc", "acme__calc-1", c0, c1, [mul], [add]),
        # -U0: hunks without context, so the expert's old_str must grow from what it read to be unique
        row(calc, "acme/calc", "acme__calc-2", c1, c2, clamp, [add, mul, "tests/test_clamp.py::test_clamp_inside"], 0),
        row(calc, "acme/calc", "acme__calc-3", c2, c3, ["tests/test_text.py::test_shout"], [add, mul, *clamp]),
        row(words, "owner/words", "owner__words-1", w0, w1, ["tests/test_words.py::test_count"], []),
    ]
    heads = {calc: git(calc, "rev-parse", "HEAD"), words: git(words, "rev-parse", "HEAD")}
    return {"repos": repos, "rows": rows, "heads": heads, "c": [c0, c1, c2, c3]}


def write_rows(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def suite(source, tmp_path_factory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("suite")
    rows = write_rows(tmp / "rows.jsonl", source["rows"])
    info = swe.import_swebench(rows, source["repos"], tmp / "swe", workers=2, log=lambda _: None)
    return tmp / "swe", info


def all_tasks(suite_dir: Path) -> list:
    return load_suite(suite_dir, "train") + load_suite(suite_dir, "heldout")


@needs_bwrap
def test_import_keeps_every_row_and_holds_out_a_repo(suite, source):
    suite_dir, info = suite
    assert info["dropped"] == {} and info["num"] == 4 and info["rows"] == 4
    assert json.loads((suite_dir / "suite.json").read_text())["dropped"] == {}
    held = info["heldout_repos"]
    assert len(held) == 1 and held[0] in ("acme/calc", "owner/words")
    tasks = {t.id.split("/")[-1]: t for t in all_tasks(suite_dir)}
    assert sorted(tasks) == ["acme__calc-1", "acme__calc-2", "acme__calc-3", "owner__words-1"]
    for t in tasks.values():
        repo = "acme/calc" if t.id.split("/")[-1].startswith("acme") else "owner/words"
        assert t.split == ("heldout" if repo in held else "train") and t.suite == "swe"
        assert t.instruction.startswith("Issue ") and t.check.kind == "swe"
        snap = suite_dir / t.repo
        assert not (snap / ".git").exists()
        for path, text in t.check.test_files.items():  # the hidden tests are not in the snapshot
            assert not (snap / path).is_file() or (snap / path).read_text() != text
    calc1 = tasks["acme__calc-1"]
    assert (suite_dir / calc1.repo / "calcpkg" / "calc.py").read_text() == CALC_V0
    assert calc1.check.test_files == {"tests/test_calc.py": TESTS_V1}
    assert calc1.check.pass_to_pass == ["tests/test_calc.py::test_add"]
    assert calc1.solution.test_paths == ["tests/test_calc.py"]
    assert tasks["acme__calc-2"].check.test_files == {"tests/test_clamp.py": CLAMP_TESTS}
    for clone, head in source["heads"].items():  # the user's clones are untouched
        assert git(clone, "rev-parse", "HEAD") == head and git(clone, "status", "--porcelain") == ""


@needs_bwrap
def test_expert_solves_every_row(suite):
    suite_dir, _ = suite
    trajectories = expert_trajectories(all_tasks(suite_dir), suite_dir, workers=2)
    assert [t.outcome.success for t in trajectories] == [True] * 4, [t.outcome.details for t in trajectories]
    for t in trajectories:
        assert t.outcome.details["fail_to_pass"]["passed"] == t.outcome.details["fail_to_pass"]["total"] > 0
    calls = [c for t in trajectories for turn in t.turns for c in turn.calls]
    assert {"read_file", "edit_file", "write_file", "run_tests", "finish"} <= {c.name for c in calls}
    assert any(c.name == "read_file" and c.arguments.get("start_line", 1) > 1 for c in calls)  # paged
    assert not any(c.error for t in trajectories for turn in t.turns for c in turn.calls)


@needs_bwrap
def test_empty_patch_fails_every_row(suite, tmp_path):
    suite_dir, _ = suite
    for i, task in enumerate(all_tasks(suite_dir)):
        ws = create_workspace(suite_dir / task.repo, tmp_path / f"ws{i}")
        try:
            ok, details = make_checker(task)(ws, None)
        finally:
            remove_workspace(ws)
        assert not ok
        assert details["fail_to_pass"]["passed"] == 0 < details["fail_to_pass"]["total"]
        assert details["pass_to_pass"]["passed"] == details["pass_to_pass"]["total"]
    clamp = next(t for t in all_tasks(suite_dir) if t.id.endswith("acme__calc-2"))
    assert not (suite_dir / clamp.repo / "tests" / "test_clamp.py").exists()  # the checks ran on copies


@needs_bwrap
def test_bad_rows_are_dropped_per_reason(source, tmp_path):
    good, r2, r3 = source["rows"][:3]
    c = source["c"]
    bad = [
        {**good, "instance_id": "no-repo", "repo": "acme/nothere"},
        {**good, "instance_id": "no-commit", "base_commit": "deadbeef" * 5},
        {**good, "instance_id": "bad-test-patch", "test_patch": good["test_patch"].replace("test_add", "test_sub")},
        # at c1 the mul fix is already in: its patch no longer applies (the clamp tests still do)
        {**good, "instance_id": "bad-patch", "base_commit": c[1], "test_patch": r2["test_patch"]},
        # test_add passes at c2 already
        {**r3, "instance_id": "passes", "FAIL_TO_PASS": ["tests/test_calc.py::test_add"]},
        # the clamp fix, but wrong: it applies, and the expert replays it, yet test_clamp_low fails
        {**r2, "instance_id": "wrong-fix", "patch": r2["patch"].replace("+        return lo", "+        return hi")},
        {**good},  # a repeated instance_id
        {**good, "instance_id": "deletes", "patch": "--- a/calcpkg/calc.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"},
    ]
    lines: list[str] = []
    info = swe.import_swebench(
        write_rows(tmp_path / "rows.jsonl", [good, *bad]), source["repos"], tmp_path / "out", log=lines.append
    )
    assert info["num"] == 1 and info["rows"] == 9
    assert info["dropped"] == {
        swe.REPO_MISSING: 1,
        swe.COMMIT_MISSING: 1,
        swe.TEST_PATCH: 1,
        swe.PATCH: 1,
        SNAPSHOT_PASSES: 1,
        EXPERT_FAILS: 1,
        swe.BAD_ROW: 1,
        swe.UNSUPPORTED: 1,
    }
    assert json.loads((tmp_path / "out" / "suite.json").read_text())["dropped"] == info["dropped"]
    missing = next(ln for ln in lines if "no-repo" in ln)
    assert str(source["repos"] / "acme" / "nothere") in missing and str(source["repos"] / "nothere") in missing
    assert any("acme__calc-1: kept (" in ln for ln in lines) and lines[-1].startswith("imported 1 of 9 rows")
    assert sorted(p.name for p in (tmp_path / "out" / "repos").rglob("*") if p.parent.parent.name == "repos") == [
        "acme__calc-1"
    ]  # dropped rows leave no snapshot
    assert not any(p.name.startswith(".out") for p in tmp_path.iterdir())  # no temp dir left


def test_malformed_rows_name_the_file_line_and_field(source, tmp_path):
    good = source["rows"][0]
    cases = {
        "FAIL_TO_PASS": {**good, "FAIL_TO_PASS": "not json"},
        "base_commit": {**good, "base_commit": 42},
        "patch": {k: v for k, v in good.items() if k != "patch"},
    }
    for field, bad in cases.items():
        path = write_rows(tmp_path / f"{field}.jsonl", [good, bad])
        with pytest.raises(TaskFileError, match=rf"{path}:2: field '{field}'"):
            swe.read_rows(path)
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(good) + "\n\n{oops\n")
    with pytest.raises(TaskFileError, match=rf"{path}:3: invalid JSON"):
        swe.read_rows(path)


def test_cli_exits_2_on_a_malformed_row(source, tmp_path, capsys):
    path = write_rows(tmp_path / "rows.jsonl", [source["rows"][0], {**source["rows"][1], "PASS_TO_PASS": 5}])
    out = tmp_path / "out"
    rc = main(["tasks", "import", "--format", "swebench", str(path), "--repos", str(source["repos"]), "-o", str(out)])
    assert rc == 2 and f"{path}:2: field 'PASS_TO_PASS'" in capsys.readouterr().err
    assert not out.exists()
    rc = main(["tasks", "import", "--format", "swebench", str(path), "--repos", str(tmp_path / "nope"), "-o", str(out)])
    assert rc == 2
    good = write_rows(tmp_path / "good.jsonl", source["rows"][:1])
    args = ["tasks", "import", "--format", "swebench", str(good), "--repos", str(source["repos"]), "-o", str(out)]
    assert main([*args, "--heldout-repos", "acme/other"]) == 2
    assert "acme/other not a repo of any row" in capsys.readouterr().err and not out.exists()


def test_json_list_and_parquet_rows(source, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = source["rows"]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    for name in ("rows.json", "rows.parquet"):
        got = swe.read_rows(tmp_path / name)
        assert [r.instance_id for _, r in got] == [r["instance_id"] for r in rows]
        assert json.loads(rows[1]["PASS_TO_PASS"]) == got[1][1].PASS_TO_PASS
        assert got[0][0] == f"{tmp_path / name}:row 1"


def test_heldout_repos():
    assert swe.heldout_repos(["a/x"], None, 0) == set()
    assert len(swe.heldout_repos(["a/x", "a/y", "a/x"], None, 0)) == 1
    assert len(swe.heldout_repos([f"a/{i}" for i in range(8)], None, 0)) == 2
    assert swe.heldout_repos(["a/x", "a/y"], ["a/x"], 0) == {"a/x"}


def test_hunk_edit_grows_context_until_unique():
    lines = ["def f():", "    return x", "", "def g():", "    return x"]
    (f,) = parse_patch("--- a/m.py\n+++ b/m.py\n@@ -5 +5 @@\n-    return x\n+    return y\n")
    old, new, after = hunk_edit(lines, f.hunks[0])
    assert (old, new) == ("def g():\n    return x", "def g():\n    return y")
    assert after[-1] == "    return y"
    with pytest.raises(ValueError, match="does not match"):
        hunk_edit(lines, Hunk(old_start=1, old_len=1, old=["nope"], new=["yes"]))


def test_a_data_config_imports_swe_rows_into_its_folder(source, tmp_path):
    """data.swe: the rows become the data folder's swe suite, validated, with the expert's episodes as
    SFT conversations for the train repos and their repo as each task's source."""
    from harnessrl.config import DataConfig
    from harnessrl.data.build import build, read_jsonl

    # Decontamination: acme__calc-1 files the held-out row's issue again, word for word, and the source
    # `pkg` holds a copy of the held-out repo's file: both are left out of what trains.
    issue = "Counting words in a sentence returns the number of characters instead of the number of words."
    rows = [dict(r, problem_statement=issue) if r["instance_id"] in ("acme__calc-1", "owner__words-1") else r
            for r in source["rows"]]  # fmt: skip
    rows = write_rows(tmp_path / "rows.jsonl", rows)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("X = 1\n")
    (tmp_path / "pkg" / "words.py").write_text("def count(s):\n    return len(s)\n")
    cfg = DataConfig(name="swe", dir="data", sources=[{"name": "pkg", "path": str(tmp_path / "pkg")}],
                     swe=[{"path": str(rows), "repos": str(source["repos"]), "heldout_repos": ["owner/words"]}])  # fmt: skip
    out = build(cfg, tmp_path / "data")
    train = [t for t in load_suite(out, "train") if t.suite == "swe"]
    held = [t for t in load_suite(out, "heldout") if t.suite == "swe"]
    assert {t.source for t in train} == {"acme/calc"} and {t.source for t in held} == {"owner/words"}
    assert "swe/train/acme__calc-1" not in {t.id for t in train} and len(train) == 2
    sft = [r for r in read_jsonl(out / "sft.jsonl") if r["suite"] == "swe"]
    assert len(sft) == len(train) and len(read_jsonl(out / "heldout.jsonl")) == len(held)
    assert json.loads((out / "mining.json").read_text())["swe:rows.jsonl"]["swe"]["kept"] == len(train) + len(held) + 1
    index = json.loads((out / "corpus" / "index.json").read_text())
    assert index["counts"]["pkg"]["decontaminated"] == 1 and index["eval_ngrams"] > 0
