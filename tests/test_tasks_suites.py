"""Task suites: deterministic builds, disjoint splits, checkers that reject unsolved work and accept the
expert's, bugfix mutants that fail where the originals pass, and the expert's success per suite."""

import re
import shutil

import pytest

from harnessrl.harness.sandbox import create_workspace, remove_workspace
from harnessrl.io import tree_digest
from harnessrl.tasks.checkers import answer_matches, make_checker, run_check
from harnessrl.tasks.expert import expert_trajectories, success_rates
from harnessrl.tasks.mutations import Mutation, apply, mutation_sites
from harnessrl.tasks.suites import SUITES, build_suite
from harnessrl.tasks.task import TaskFileError, load_suite, load_tasks
from tests.conftest import needs_bwrap

NUM = 8


@pytest.fixture(scope="module")
def suites(tmp_path_factory):
    root = tmp_path_factory.mktemp("suites")
    for name in SUITES:
        build_suite(name, root / name, seed=3, num=NUM)
    return {name: root / name for name in SUITES}


@pytest.fixture(scope="module")
def expert_runs(suites):
    tasks = [(name, t) for name, d in suites.items() for s in ("train", "heldout") for t in load_suite(d, s)]
    return {name: expert_trajectories([t for n, t in tasks if n == name], suites[name], workers=4) for name in suites}


def all_tasks(suite_dir):
    return load_suite(suite_dir, "train") + load_suite(suite_dir, "heldout")


@needs_bwrap
def test_same_seed_same_bytes(suites, tmp_path):
    for name in ("lookup", "edit", "long_horizon", "bugfix"):
        build_suite(name, tmp_path / name, seed=3, num=NUM)
        assert tree_digest(tmp_path / name) == tree_digest(suites[name]), name
    build_suite("lookup", tmp_path / "other", seed=4, num=NUM)
    assert tree_digest(tmp_path / "other") != tree_digest(suites["lookup"])


@needs_bwrap
def test_splits_use_disjoint_repos(suites):
    for name, d in suites.items():
        train, held = load_suite(d, "train"), load_suite(d, "heldout")
        assert len(train) + len(held) == NUM and len(held) == NUM // 4, name
        assert {t.repo for t in train}.isdisjoint({t.repo for t in held}), name
        assert all(t.repo.startswith(f"repos/{t.split}/") for t in train + held)
        assert len({t.id for t in train + held}) == NUM


@needs_bwrap
def test_checkers_reject_unsolved_workspaces(suites, tmp_path):
    for name, d in suites.items():
        for i, task in enumerate(all_tasks(d)):
            ws = create_workspace(d / task.repo, tmp_path / f"{name}-{i}", method="copy")
            wrong = "I do not know" if task.check.kind == "answer" else None
            ok, details = make_checker(task)(ws, wrong)
            assert ok is False, (task.id, details)
            remove_workspace(ws)


@needs_bwrap
def test_expert_solves_every_generated_task(expert_runs):
    rates = {name: success_rates(runs) for name, runs in expert_runs.items()}
    assert rates == {name: {name: 1.0} for name in SUITES}, [
        (t.task_id, t.outcome.details) for runs in expert_runs.values() for t in runs if not t.outcome.success
    ]


@needs_bwrap
def test_expert_makes_parallel_calls(expert_runs):
    for name in ("edit", "bugfix"):
        assert any(t.counts.parallel_turns > 0 for t in expert_runs[name]), name
    turn = next(t for t in expert_runs["bugfix"][0].turns if len(t.calls) > 1)
    assert [c.name for c in turn.calls] == ["run_tests", "read_file", "grep"]
    asked = [t for t in expert_runs["edit"] if t.counts.ask_user]
    assert all(len(t.turns[0].calls) == 2 for t in asked)  # grep and ask_user in one turn


@needs_bwrap
def test_lookup_conversations_are_short(expert_runs):
    for t in expert_runs["lookup"]:
        assert [m["role"] for m in t.messages] == ["system", "user", "assistant", "tool", "assistant"]
        assert sum(len(m["content"]) for m in t.messages) < 600  # ~100-150 tokens of the tiny BPE


@needs_bwrap
def test_long_horizon_needs_a_search_per_value(expert_runs):
    for t in expert_runs["long_horizon"]:
        values = re.findall(r"= (\d+)", t.outcome.details["expected"])  # keyed: "A = 201, B = 738, C = 95"
        assert len(values) == 3 and t.counts.turns == len(values) + 1 and t.counts.parallel_turns == 0
        # Each value is read from a tool result, never from the task: an answer must be carried there.
        assert not any(v in t.messages[1]["content"] for v in values)


@needs_bwrap
def test_bugfix_originals_pass_and_mutants_fail(suites, tmp_path):
    d = suites["bugfix"]
    for i, task in enumerate(all_tasks(d)):
        s = task.solution
        mutant = d / task.repo
        assert (mutant / s.test_path).is_file()
        fixed = tmp_path / f"fixed-{i}"
        shutil.copytree(mutant, fixed)
        source = (fixed / s.path).read_text()
        assert source.count(s.old) == 1
        (fixed / s.path).write_text(source.replace(s.old, s.new))
        assert run_check(mutant, task.check.test, task.check.packages)[0] is False, task.id
        assert run_check(fixed, task.check.test, task.check.packages)[0] is True, task.id


# Argument types from hints, or from literal calls in the package (a doctest for clip): a probe passes
# what the code takes (harnessrl/tasks/probe.py).
FAKE_PACKAGE = {
    "__init__.py": "",
    "text.py": (
        "def words(s: str) -> int:\n    return len(s.split())\n\n\n"
        "def shout(s: str, times: int = 1) -> str:\n    return s.upper() + '!' * times\n\n\n"
        "def clip(s, n):\n    \"\"\">>> clip('abcdef', 3)\n    'abc'\n    >>> clip('ab', 3)\n    'ab'\n    \"\"\"\n"
        "    if len(s) > n:\n        return s[:n]\n    return s\n"
    ),
    "nums.py": (
        "def mean(xs: list) -> float:\n    if not xs:\n        return 0\n    return sum(xs) / len(xs)\n\n\n"
        "def span(a: int, b: int) -> int:\n    return abs(a - b) + 1\n\n\n"
        "def is_even(n: int) -> bool:\n    return n % 2 == 0\n"
    ),
    "seq.py": (
        "def window(xs: list, n: int) -> list:\n    return [xs[i : i + n] for i in range(len(xs) - n + 1)]\n\n\n"
        "def last(xs: list, k: int = 1) -> list:\n    return xs[-k:] if k > 0 else []\n"
    ),
    "util.py": "def double(x: int) -> int:\n    return x * 2\n\n\ndef inc(x: int) -> int:\n    return x + 1\n",
}


@needs_bwrap
def test_bugfix_from_a_real_directory(tmp_path):
    src = tmp_path / "minitext"
    for rel, text in FAKE_PACKAGE.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    build_suite("bugfix", tmp_path / "suite", seed=0, num=5, sources=[src])
    train, held = load_suite(tmp_path / "suite", "train"), load_suite(tmp_path / "suite", "heldout")
    assert len(train) == 5 and held == []  # one source: all train (several: a quarter held out whole)
    assert all(t.check.packages == ["minitext"] and t.source == "minitext" for t in train)
    runs = expert_trajectories(train, tmp_path / "suite", workers=2)
    assert success_rates(runs) == {"bugfix": 1.0}


def test_mutations_keep_every_other_byte():
    source = "def f(a, b):\n    # keep + this\n    return a + b * 2\n"
    sites = mutation_sites(source, (1, 3))
    assert [(m.old, m.new) for m in sites] == [("+", "-"), ("*", "+"), ("2", "3")]
    assert apply(source, sites[0]) == "def f(a, b):\n    # keep + this\n    return a - b * 2\n"
    assert apply("def g(*args):\n    return args\n", Mutation(1, 6, "*", "+", "operator")) is None


def test_answers_compare_as_values():
    assert answer_matches("123", "123") and answer_matches("123", "The value is 123.")
    assert answer_matches("pkg/mod.py", "`pkg/mod.py`") and answer_matches(
        "pkg/mod.py", "It is in /workspace/pkg/mod.py"
    )
    assert not answer_matches("123", "123 or 124") and not answer_matches("123", None)
    assert not answer_matches("pkg/mod.py", "pkg/mod.py or pkg/other.py")


@needs_bwrap
def test_bad_task_file_names_the_field(suites, tmp_path):
    good = (suites["lookup"] / "tasks" / "train.jsonl").read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good[0] + "\n" + good[1].replace('"kind":"answer"', '"kind":"vibes"') + "\n")
    with pytest.raises(TaskFileError, match=r"bad.jsonl:2: field 'check.kind'"):
        load_tasks(bad)
    bad.write_text(good[0].replace('"instruction"', '"instructions"') + "\n")
    with pytest.raises(TaskFileError, match=r"bad.jsonl:1: .*field 'instruction': Field required"):
        load_tasks(bad)
    bad.write_text("{not json\n")
    with pytest.raises(TaskFileError, match=r":1: invalid JSON"):
        load_tasks(bad)
    with pytest.raises(TaskFileError, match="suite directory not found"):
        load_suite(tmp_path / "missing", "train")
