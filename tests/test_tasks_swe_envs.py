"""Per-row environments for imported SWE rows: a repository that needs a real third-party package at a
pinned version (inflection==0.5.1, from the package registry, as data-build time installs it) gets a
venv built from its own requirements at the row's environment commit; the check and the expert's
tools run in it, and the harness's own Python, which lacks the package, would fail the same fix. A
row whose environment cannot be built is dropped as env_failed."""

from __future__ import annotations

import pytest

from harnessrl.harness.sandbox import PYTHON, create_workspace, remove_workspace
from harnessrl.sources.envs import EnvError, requirements_of
from harnessrl.tasks import swe
from harnessrl.tasks.checkers import make_checker
from harnessrl.tasks.diffs import parse_patch
from harnessrl.tasks.expert import expert_trajectories
from harnessrl.tasks.task import load_suite
from tests.conftest import needs_bwrap
from tests.test_tasks_swe import commit, git, row, write_rows

PLURAL_V0 = "import inflection\n\n\ndef plural(word):\n    return inflection.singularize(word)\n"
PLURAL_V1 = PLURAL_V0.replace("singularize", "pluralize")
TESTS = "from words.plural import plural\n\n\ndef test_plural():\n    assert plural('cat') == 'cats'\n"


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("swe-envs")
    repo = root / "repos" / "acme" / "words"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    env_commit = commit(repo, {"requirements.txt": "inflection==0.5.1  # pinned\n", "words/__init__.py": ""}, "deps")
    base = commit(repo, {"words/plural.py": PLURAL_V0, "tests/test_other.py": "def test_ok():\n    pass\n"}, "plural")
    fix = commit(repo, {"words/plural.py": PLURAL_V1, "tests/test_plural.py": TESTS}, "fix plural")
    good = row(repo, "acme/words", "acme__words-1", base, fix, ["tests/test_plural.py::test_plural"], [])
    good["environment_setup_commit"] = env_commit
    broken = dict(good, instance_id="acme__words-2", version="9.9", environment_setup_commit=None)
    # The second row's environment is its base commit's requirements, made unbuildable there.
    git(repo, "rm", "-q", "tests/test_plural.py")
    bad = {"requirements.txt": "harnessrl-no-such-package-anywhere==0.0.1\n", "words/plural.py": PLURAL_V0}
    bad_base = commit(repo, bad, "bad deps, the bug back")
    broken["base_commit"] = bad_base
    broken["patch"] = git(repo, "diff", bad_base, fix, "--", "words")
    broken["test_patch"] = git(repo, "diff", bad_base, fix, "--", "tests")
    rows = write_rows(root / "rows.jsonl", [good, broken])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNESSRL_ENV_CACHE", str(root / "cache"))
        info = swe.import_swebench(rows, root / "repos", root / "swe", workers=1, log=lambda _: None)
        yield root / "swe", info


@needs_bwrap
def test_a_row_with_a_pinned_dependency_gets_its_environment_and_the_expert_solves_it(imported):
    suite, info = imported
    assert info["num"] == 1 and info["dropped"] == {swe.ENV_FAILED: 1}
    (task,) = load_suite(suite, "train") + load_suite(suite, "heldout")
    assert task.env is not None and task.env.startswith("envs/swe/acme__words-")
    lock = (suite / task.env / "lock.txt").read_text()
    assert "inflection==0.5.1" in lock.splitlines() and any(p.startswith("pytest==") for p in lock.splitlines())
    (traj,) = expert_trajectories([task], suite, workers=1)
    assert traj.outcome.success, traj.outcome.details
    # The environment is what made it pass: the same fix checked on the harness's own Python fails.
    ws = create_workspace(suite / task.repo, suite.parent / "ws-harness-python", method="copy")
    try:
        assert [f.path for f in parse_patch(task.solution.patch or "")] == ["words/plural.py"]
        (ws / "words" / "plural.py").write_text(PLURAL_V1)
        ok, details = make_checker(task, PYTHON, suite / task.repo)(ws, None)
        assert not ok and "inflection" in details["output"]
    finally:
        remove_workspace(ws)


def test_requirements_are_read_from_every_file_a_repo_declares_them_in(tmp_path):
    (tmp_path / "requirements.txt").write_text("-r requirements-dev.txt\nsix==1.16.0  # note\n-e .\n")
    (tmp_path / "requirements-dev.txt").write_text("# dev\npytest-mock==3.14.0\n")
    assert requirements_of(tmp_path) == (
        "requirements-dev.txt, requirements.txt",
        ["pytest-mock==3.14.0", "six==1.16.0"],
    )
    for p in tmp_path.iterdir():
        p.unlink()
    (tmp_path / "setup.py").write_text(
        "from setuptools import setup\nsetup(name='x', install_requires=['six>=1'], tests_require=['mock'])\n"
    )
    assert requirements_of(tmp_path) == ("setup.py", ["six>=1", "mock"])
    (tmp_path / "setup.py").write_text(
        "from setuptools import setup\nsetup(install_requires=open('r').read().split())\n"
    )
    with pytest.raises(EnvError, match=r"setup.py: setup\(install_requires=...\) is computed"):
        requirements_of(tmp_path)
    (tmp_path / "setup.py").unlink()
    assert requirements_of(tmp_path) is None  # nothing declared: the harness's own Python
