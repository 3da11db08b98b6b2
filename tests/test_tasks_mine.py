"""Tasks mined from real code: candidates of every suite, kept only when their check tells the
expert's solution from the untouched snapshot, and drops counted by reason."""

from __future__ import annotations

import ast
import json
import random
import subprocess
from pathlib import Path

from harnessrl.cli import main
from harnessrl.config import SourceConfig
from harnessrl.harness.sandbox import PYTHON
from harnessrl.tasks import lint
from harnessrl.tasks.edit import new_name
from harnessrl.tasks.expert import expert_trajectories, success_rates
from harnessrl.tasks.mine import mine_sources, read_repo
from harnessrl.tasks.probe import arg_sets, param_types, repo_functions
from harnessrl.tasks.repogen import Repo
from harnessrl.tasks.task import load_suite
from harnessrl.tasks.validate import EXPERT_FAILS, SNAPSHOT_PASSES, validate
from tests.conftest import needs_bwrap

# A small real-looking package: numeric constants, probe-able functions (their argument types from type
# hints, or a doctest for clamp), classes, one name defined twice.
PACKAGE = {
    "__init__.py": '"""Geometry helpers."""\n',
    "shapes.py": (
        '"""Shapes."""\nimport math\n\nSIDES = 4\nUNIT = 2.5\nLABEL = "square"\nTWICE = 1\n\n\n'
        "def area(width: int, height: int) -> int:\n    return width * height\n\n\n"
        "def perimeter(width: int, height: int) -> int:\n    total = width + height\n    return 2 * total\n\n\n"
        "def circle(radius: float) -> float:\n    return round(math.pi * radius * radius, 3)\n\n\n"
        "def count_sides(shapes):\n    return len(shapes) * 2\n\n\n"
        "class Square:\n    def __init__(self, side):\n        self.side = side\n"
    ),
    "grid.py": (
        "from geo.shapes import area\n\nCOLUMNS = 12\nROWS = 8\nTWICE = 2\n\n\n"
        "def cells(count, scale):\n    return area(count, scale) + COLUMNS\n\n\n"
        'def clamp(value, limit):\n    """The value, at most limit.\n\n    >>> clamp(5, 3)\n    3\n    >>> clamp(-2, 9)\n    -2\n    """\n'
        "    if value > limit:\n        return limit\n    return value\n\n\n"
        "class Grid(object):\n    pass\n"
    ),
}


def write_package(root: Path) -> Path:
    for rel, text in PACKAGE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_read_repo_keeps_symbols_with_one_answer(tmp_path):
    repo = read_repo(write_package(tmp_path / "geo"))
    names = {s.name: s for s in repo.symbols}
    assert {"SIDES", "UNIT", "LABEL", "COLUMNS", "ROWS", "area", "clamp", "Square", "Grid"} <= set(names)
    assert "TWICE" not in names  # defined in two modules: "what is its value" has two answers
    assert names["UNIT"].value == 2.5 and names["Grid"].path == "grid.py"


def test_planted_lint_violations_are_what_ruff_reports(tmp_path):
    text = PACKAGE["grid.py"]
    rng = random.Random(0)
    for plant, code in ((lint.unused_import, "F401"), (lint.undefined_name, "F821")):
        mutated, _ = plant(rng, text)
        (tmp_path / "m.py").write_text(mutated)
        cmd = [
            PYTHON,
            "-m",
            "ruff",
            "check",
            "--isolated",
            "--select",
            lint.RULES,
            "--no-cache",
            str(tmp_path / "m.py"),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True).stdout
        assert code in out and out.count(code) == 1, out


@needs_bwrap
def test_every_suite_mines_validated_tasks_the_expert_solves(tmp_path):
    src = write_package(tmp_path / "geo")
    wants = {"lookup": 6, "multi_lookup": 3, "long_horizon": 3, "edit": 3, "lint": 3, "bugfix": 3}
    cfg = SourceConfig(name="geo", path=str(src), tasks=wants)
    kept, episodes, infos, stats = mine_sources([cfg], 0, tmp_path / "out", workers=2)
    assert infos[0].revision.startswith("tree:")
    for suite in wants:
        assert stats["geo"][suite]["kept"] >= 2, (suite, stats["geo"][suite])
        assert stats["geo"][suite]["expert_success"] == 1.0
    tasks = kept["train"]
    assert {t.suite for t in tasks} == set(wants) and {t.source for t in tasks} == {"geo"}
    assert len({t.id for t in tasks}) == len(tasks)
    assert {t.solution.kind for t in tasks if t.suite == "edit"} == {"rename", "constant", "param"}
    # Each multi-lookup asks for a different handful of the module's one-answer constants.
    multi = [t for t in tasks if t.suite == "multi_lookup"]
    assert len({tuple(sorted(t.solution.names)) for t in multi}) == len(multi)
    assert all(set(t.solution.names) <= {"SIDES", "UNIT", "LABEL", "COLUMNS", "ROWS"} for t in multi)
    # Kept means: the expert solves it again, and doing nothing fails it.
    again = expert_trajectories(tasks, tmp_path / "out", workers=2)
    assert set(success_rates(again).values()) == {1.0}
    assert all(episodes[t.id].outcome.success for t in tasks)


@needs_bwrap
def test_validation_drops_what_cannot_tell_solved_from_untouched(tmp_path):
    src = write_package(tmp_path / "geo")
    out = tmp_path / "out"
    kept, _, _, _ = mine_sources([SourceConfig(name="geo", path=str(src), tasks={"lint": 2})], 0, out, workers=1)
    good = kept["train"][0]
    # A check that passes on the snapshot: the planted violation undone in the task's snapshot.
    fixed = good.model_copy(update={"id": "lint/geo/undone"})
    path = out / fixed.repo / good.solution.path
    path.write_text(path.read_text().replace(good.solution.old, good.solution.new, 1))
    # An expert whose solution does not apply: its edit_file finds nothing to replace.
    broken = kept["train"][1].model_copy(update={"id": "lint/geo/broken"})
    broken = broken.model_copy(update={"solution": broken.solution.model_copy(update={"old": "no such text\n"})})
    survivors, _, dropped = validate([fixed, broken], out, workers=1)
    assert survivors == [] and {k: r for k, (r, _) in dropped.items()} == {fixed.id: SNAPSHOT_PASSES,
                                                                          broken.id: EXPERT_FAILS}  # fmt: skip
    assert "old_str not found" in dropped[broken.id][1]  # the line says why


@needs_bwrap
def test_tasks_build_from_several_sources_holds_one_out_and_stats_say_so(tmp_path, capsys):
    sources = [write_package(tmp_path / name) for name in ("geo", "geo2")]
    (tmp_path / "geo2" / "grid.py").write_text(PACKAGE["grid.py"].replace("geo.shapes", "geo2.shapes"))
    args = ["tasks", "build", "--suite", "lookup", "--num", "4", "-o", str(tmp_path / "s")]
    assert main([*args, "--source", str(sources[0]), "--source", str(sources[1])]) == 0
    assert "4 train, 4 heldout" in capsys.readouterr().out
    held = load_suite(tmp_path / "s", "heldout")
    assert {t.source for t in held} == {"geo2"} and {t.source for t in load_suite(tmp_path / "s", "train")} == {"geo"}
    assert main(["tasks", "stats", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert "lookup        geo                       4        0" in out and "geo2" in out
    assert json.loads((tmp_path / "s" / "mining.json").read_text())["geo2"]["lookup"]["kept"] == 4


@needs_bwrap
def test_a_process_pool_and_ray_tasks_mine_the_same_tasks(tmp_path, ray_session):
    """Sources mined one after another, in a process pool, or as Ray tasks: the same tasks and stats."""
    for name in ("geo", "geo2"):
        write_package(tmp_path / name)
    (tmp_path / "geo2" / "grid.py").write_text(PACKAGE["grid.py"].replace("geo.shapes", "geo2.shapes"))
    cfgs = [
        SourceConfig(name=n, path=str(tmp_path / n), tasks={"lookup": 3, "lint": 2, "bugfix": 2})
        for n in ("geo", "geo2")
    ]
    serial = mine_sources(cfgs, 0, tmp_path / "serial", workers=2)
    for out, kwargs in (("pool", {"processes": 2}), ("ray", {"use_ray": True})):
        kept, episodes, infos, stats = mine_sources(cfgs, 0, tmp_path / out, workers=2, **kwargs)
        assert [t.model_dump() for t in kept["train"]] == [t.model_dump() for t in serial[0]["train"]], out
        assert stats == serial[3] and infos == serial[2] and episodes.keys() == serial[1].keys()
        assert not list((tmp_path / out).glob(".*")), "a scratch folder was left behind"


def test_probes_pass_arguments_of_the_types_the_code_takes(tmp_path):
    # Types from hints, else from the literals the repo itself passes (a doctest here); a function
    # with neither is not probed: `count_sides(0)` asserts nothing anyone wants.
    fns = {f.name: f for f in repo_functions(write_package(tmp_path / "geo"))}
    assert fns["clamp"].examples == ("5, 3", "-2, 9") and param_types(fns["clamp"]) == ["int", "int"]
    assert param_types(fns["circle"]) == ["float"] and param_types(fns["count_sides"]) == [""]
    assert arg_sets(fns["count_sides"], random.Random(0)) == []
    drawn = arg_sets(fns["area"], random.Random(0), n=6)
    assert len(drawn) == 6 and all(isinstance(v, int) for a in drawn for v in ast.literal_eval(f"({a},)"))
    assert arg_sets(fns["clamp"], random.Random(0), n=3)[:2] == ["5, 3", "-2, 9"]  # the repo's own first


def test_a_rename_asks_for_a_name_in_the_code_s_own_words():
    repo = Repo(package="p", files={"p/m.py": "def get_ttext():\n    pass\n\n\ndef area():\n    _area = 1\n"})
    rng = random.Random(0)
    assert new_name(rng, "get_ttext", repo, set()) == "fetch_ttext"  # the verb's synonym
    assert new_name(rng, "_decode_uXXXX", repo, set()) == "decode_uXXXX"  # made public
    assert new_name(rng, "shapes", repo, set()) == "_shapes"  # made private
    assert new_name(rng, "area", repo, set()).count("_") == 2  # `_area` is taken: a made-up name is the last resort
