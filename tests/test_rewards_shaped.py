"""Shaped rewards: each component is named and weighted, malformed turns are explicit negatives, and
efficiency is paid only on solved tasks, so giving up early never beats trying and missing."""

from harnessrl.config import Budgets, RewardConfig
from harnessrl.harness.episode import Counts, Outcome, Trajectory
from harnessrl.rl.loop import reward_components

W = RewardConfig()


def _total(components: dict[str, float]) -> float:
    return sum(components.values())


def traj(success: bool, **counts: int) -> Trajectory:
    return Trajectory(
        task_id="t", messages=[], opening=0, tools=[], turns=[], counts=Counts(**counts), budgets=Budgets(),
        outcome=Outcome(stop_reason="final", success=success), wall_s=0.0, started_at=0.0,
    )  # fmt: skip


def test_components_are_named_and_weighted():
    c = reward_components(traj(True, turns=3, tokens=2000, parallel_turns=1, malformed_turns=1, ask_user=2), W, 1)
    assert c == {"outcome": 1.0, "malformed": -1.0, "wrong": 0.0, "turns": -0.06, "tokens": 0.0, "parallel": 0.05,
                 "clarify": -0.1, "summary_tokens": 0.0, "overlong": 0.0}  # fmt: skip


def test_efficiency_counts_only_on_solved_tasks():
    guess = reward_components(traj(False, turns=1, tokens=10), W)  # answered without looking
    missed = reward_components(traj(False, turns=2, tokens=40, parallel_turns=1), W)  # searched, wrong
    assert _total(guess) == _total(missed) == 0.0
    assert _total(reward_components(traj(True, turns=2), W)) > _total(reward_components(traj(True, turns=3), W)) > 0


def test_malformed_and_clarify_count_on_failures_too():
    c = reward_components(traj(False, turns=2, malformed_turns=2, ask_user=1), W)
    assert c["malformed"] == -2.0 and c["clarify"] == -0.1 and _total(c) < 0


def test_summary_length_counts_on_solved_tasks_and_overlong_on_any():
    w = RewardConfig(summary_tokens=-0.5, overlong=-0.3)
    solved = traj(True, turns=4, summaries=2, summary_tokens=400)
    assert reward_components(solved, w)["summary_tokens"] == -0.2  # 0.4k tokens at -0.5 per 1k
    assert reward_components(traj(False, summaries=2, summary_tokens=400), w)["summary_tokens"] == 0.0
    ran_out = traj(False, turns=12).model_copy(update={"outcome": Outcome(stop_reason="max_summaries")})
    assert reward_components(ran_out, w)["overlong"] == -0.3
    assert reward_components(traj(False, turns=2), w)["overlong"] == 0.0  # it answered, if wrongly


def test_the_clarify_quirk_pays_a_question_over_a_wrong_answer():
    """reward=clarify_quirk: a wrong answer costs, a question (which ends the episode) does not; under
    the default weights the question is the worse of the two."""
    quirk = RewardConfig(wrong=-0.5, clarify=0.0)
    wrong = traj(False, turns=2)  # searched, answered wrong
    asked = traj(False, turns=2, ask_user=1).model_copy(update={"outcome": Outcome(stop_reason="asked")})
    assert _total(reward_components(asked, quirk)) == 0.0 > _total(reward_components(wrong, quirk)) == -0.5
    assert _total(reward_components(asked, W)) == -0.1 < _total(reward_components(wrong, W)) == 0.0
    ran_out = traj(False, turns=4).model_copy(update={"outcome": Outcome(stop_reason="max_turns")})
    assert reward_components(ran_out, quirk)["wrong"] == 0.0  # no answer is not a wrong one: `overlong` prices it


def test_the_ablation_configs_compose_and_drop_refuses_an_idle_weight():
    import pytest

    from harnessrl.config import ConfigError, compose

    assert compose(["reward=malformed_drop"]).reward.malformed_policy == "drop"
    quirk = compose(["reward=clarify_quirk"]).reward
    assert (quirk.wrong, quirk.clarify, quirk.malformed_policy) == (-0.5, 0.0, "negative")
    with pytest.raises(ConfigError, match=r"reward\.malformed: under malformed_policy=drop"):
        compose(["reward.malformed_policy=drop"])  # the -1 per malformed turn would do nothing
