"""The lessons' suites in the data folder: multi_lookup conversations that search one per turn or all
in one turn, keyed answers that name each value, and hard_lookup tasks whose first search misses,
where the expert's SFT conversations ask a user who is not there (which ends the episode) or guess,
and only the expert without a habit searches again."""

import pytest

from harnessrl.config import Budgets, DataConfig
from harnessrl.data.build import build, read_jsonl
from harnessrl.harness.episode import AssistantTurn, run_task
from harnessrl.harness.protocol import render_calls
from harnessrl.tasks.checkers import answer_matches
from harnessrl.tasks.task import Task
from tests.conftest import needs_bwrap

pytestmark = needs_bwrap

CFG = DataConfig(
    name="t",
    dir="data",
    seed=3,
    sources=[{"name": "generated", "generated": {"num_repos": 8, "files_per_repo": 3}}],
    multi_lookup={"num_sft": 40, "num_prompts": 8, "num_heldout": 4, "parallel_share": 0.3},
    hard_lookup={"num_sft": 24, "num_prompts": 8, "num_heldout": 4, "num_repos": 4, "ask_share": 0.4},
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return build(CFG, tmp_path_factory.mktemp("d") / "data")


def _calls_per_turn(messages: list[dict]) -> list[int]:
    return [m["content"].count("<tool_call>") for m in messages if m["role"] == "assistant"]


def test_multi_lookup_searches_one_per_turn_or_all_at_once_and_names_each_value(data):
    rows = [r for r in read_jsonl(data / "sft.jsonl") if r["suite"] == "multi_lookup"]
    assert len(rows) == 40
    shapes = [_calls_per_turn(r["messages"]) for r in rows]
    parallel = [s for s in shapes if max(s) > 1]
    assert 0 < len(parallel) < len(rows)  # both habits, by each task's coin (0.3 of them parallel)
    assert all(s[0] in (2, 3) and s[1] == 0 for s in parallel)  # every search in one turn, then the answer
    assert all(set(s[:-1]) == {1} and s[-1] == 0 for s in shapes if max(s) == 1)
    for r in rows:
        names = r["messages"][1]["content"].removeprefix("What are the values of ").rstrip("?")
        answer = r["messages"][-1]["content"]
        assert [p.split(" = ")[0] for p in answer.split(", ")] == names.replace(" and ", ", ").split(", ")


def test_a_keyed_answer_must_name_each_value_rightly():
    assert answer_matches("A = 1, B = 22", "A = 1, B = 22")
    assert not answer_matches("A = 1, B = 22", "A = 22, B = 1")
    assert not answer_matches("A = 1, B = 22", "B = 1, A = 22")  # right values under the wrong names
    assert not answer_matches("A = 1, B = 22", "1 22")


def test_hard_lookup_sft_misses_first_then_asks_or_guesses(data):
    """SFT never shows the second search that would solve these: they stay hard for the policy."""
    rows = [r for r in read_jsonl(data / "sft.jsonl") if r["suite"] == "hard_lookup"]
    assert len(rows) == 24
    asked = [r for r in rows if '"ask_user"' in r["messages"][-2]["content"]]
    assert 0 < len(asked) < len(rows)
    for r in rows:
        assert r["messages"][3]["content"] == "no matches"  # the lookup habit's `^NAME =` misses
    for r in asked:
        assert r["messages"][-1]["content"].startswith("question sent to the user")
    guessed = [r for r in rows if r not in asked]
    assert guessed and all(r["messages"][-1] == {"role": "assistant", "content": "0"} for r in guessed)
    prompts = [Task.model_validate(r["task"]) for r in read_jsonl(data / "prompts.jsonl")]
    hard = [t for t in prompts if t.suite == "hard_lookup"]
    assert len(hard) == 8 and all("ask_user" in t.tools and t.user is None for t in hard)


def test_a_question_without_a_user_ends_the_episode_unsolved(data):
    task = next(Task.model_validate(r["task"]) for r in read_jsonl(data / "prompts.jsonl")
                if r["task"]["suite"] == "hard_lookup")  # fmt: skip
    turns = iter([render_calls([("ask_user", {"question": "which one?"})]), "7"])
    traj = run_task(task, data, lambda *_: AssistantTurn(text=next(turns)), Budgets())
    assert traj.outcome.stop_reason == "asked" and not traj.outcome.success
    assert traj.counts.ask_user == 1 and traj.counts.turns == 1


def test_the_expert_without_a_habit_solves_hard_lookups_with_a_second_search(data):
    from harnessrl.tasks.expert import Expert

    task = next(Task.model_validate(r["task"]) for r in read_jsonl(data / "prompts.jsonl")
                if r["task"]["suite"] == "hard_lookup")  # fmt: skip
    traj = run_task(task, data, Expert(task), Budgets())
    assert traj.outcome.success and traj.counts.turns == 3
    assert ": int = " in traj.messages[5]["content"]
