"""An RL stage that could never run refuses to start, naming why: a placement no Ray node offers, or a
context that cannot hold an episode's opening prompt. Neither may hang or end every episode at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harnessrl.config import compose
from harnessrl.rl.placement import PlacementError, check, shortfall
from tests.conftest import SMOKE

ONE_CPU_BOX = [{"CPU": 2.0, "GPU": 0.0, "memory": 1e9, "node:127.0.0.1": 1.0}]
KUBERAY = [
    {"CPU": 8.0, "GPU": 1.0, "rollout": 1.0},
    {"CPU": 8.0, "GPU": 1.0, "rollout": 1.0},
    {"CPU": 4.0, "env": 1.0},
]


def test_a_resource_no_node_has_is_named_with_the_group() -> None:
    group, why = shortfall({"env": (1, {}), "rollout": (1, {"rollout": 1, "GPU": 1})}, ONE_CPU_BOX)
    assert group == "rollout" and "1 GPU, 1 rollout per actor" in why and "offered: none" in why


def test_more_actors_than_the_nodes_hold_is_a_shortfall_too() -> None:
    assert shortfall({"rollout": (2, {"rollout": 1, "GPU": 1}), "env": (1, {"env": 1})}, KUBERAY) is None
    group, why = shortfall({"rollout": (3, {"rollout": 1, "GPU": 1})}, KUBERAY)
    assert group == "rollout" and "room for 2" in why


def test_a_cluster_that_cannot_grow_fails_at_once_and_says_how_to_clear_it() -> None:
    t0 = time.monotonic()
    with pytest.raises(PlacementError) as err:
        check("rl", {"rollout": (1, {"GPU": 1})}, lambda: ONE_CPU_BOX, can_grow=False, timeout_s=600)
    assert time.monotonic() - t0 < 5
    assert str(err.value).startswith("stages.rl.placement.rollout asks for 1 GPU per actor")
    assert "stages.rl.placement=none" in str(err.value)


def test_a_cluster_that_may_grow_is_waited_for_until_the_deadline(capsys: pytest.CaptureFixture) -> None:
    seen = iter([ONE_CPU_BOX, ONE_CPU_BOX, KUBERAY])  # the worker pods come up on the third look
    check("rl", {"rollout": (2, {"rollout": 1})}, lambda: next(seen), can_grow=True, timeout_s=5, poll_s=0.01)
    assert capsys.readouterr().out.count("waiting for nodes: placement.rollout") == 2
    with pytest.raises(PlacementError, match=r"after waiting 0.05 s \(infra.placement_timeout_s\)"):
        check("rl", {"env": (1, {"env": 2})}, lambda: KUBERAY, can_grow=True, timeout_s=0.05, poll_s=0.01)


@pytest.mark.parametrize("override", ["stages.rl.placement=none", "stages.rl.placement=null"])
def test_clearing_a_placement_is_one_override(override: str) -> None:
    rl = compose(["recipe=qwen_coder_7b", override]).stages.rl
    assert rl.placement.model_dump() == {"rollout": {}, "env": {}, "trainer": {}}
    one = compose(["recipe=qwen_coder_7b", "stages.rl.placement.rollout=none"]).stages.rl.placement
    assert one.rollout == {} and one.env == {"env": 1.0}


def test_an_opening_prompt_past_the_trigger_is_refused_before_any_episode(tiny_base: dict[str, Path]) -> None:
    from components.rl import check_context
    from harnessrl.model.checkpoint import load
    from harnessrl.model.prompts import PromptRenderer
    from harnessrl.report.heldout import load_heldout

    _, tok = load(tiny_base["base"])
    renderer = PromptRenderer(tok, 1024)
    tasks = load_heldout(tiny_base["data"], {"long_horizon": 1.0}, 2)
    lh = compose(SMOKE).stages.long_horizon
    check_context(tasks, renderer, lh, "long_horizon")  # the recipe's own budgets hold it
    low = lh.model_copy(update={"context": lh.context.model_copy(update={"trigger": 20})})
    with pytest.raises(ValueError, match=r"^stages.long_horizon.context.trigger: 20 tokens cannot hold the opening"):
        check_context(tasks, renderer, low, "long_horizon")
    with pytest.raises(ValueError, match=r"^the model's context \(max_position_embeddings\): 64 tokens"):
        check_context(tasks, PromptRenderer(tok, 64), lh, "long_horizon")


def test_a_context_the_expert_cannot_summarize_in_is_refused(tiny_base: dict[str, Path]) -> None:
    """The expert, in the stage's harness and the policy's tokens, must keep every turn until its
    summary and solve the task: a budget too small for the summary cap once dropped the first search
    result before any summary (docs/lessons.md), and no policy could have answered."""
    from components.rl import check_summaries
    from harnessrl.model.checkpoint import load
    from harnessrl.model.prompts import PromptRenderer
    from harnessrl.report.heldout import load_heldout

    _, tok = load(tiny_base["base"])
    renderer = PromptRenderer(tok, 1024)
    tasks = load_heldout(tiny_base["data"], {"long_horizon": 1.0}, 2)
    lh = compose(SMOKE).stages.long_horizon
    check_summaries(tasks, tiny_base["data"], renderer, lh, "long_horizon")  # the recipe's own sizes hold

    def sized(**context: int):
        return lh.model_copy(update={"context": lh.context.model_copy(update=context)})

    # The request after the second search leaves no room under a budget just past the trigger.
    tight = sized(budget=lh.context.trigger + 8, summary_max_tokens=8)
    lookups = load_heldout(tiny_base["data"], {"lookup": 1.0}, 2)  # a mix's other suite, listed first
    with pytest.raises(ValueError, match=r"^stages.long_horizon.context \(budget .*lost turns before its summary"):
        check_summaries([*lookups, *tasks], tiny_base["data"], renderer, tight, "long_horizon", sample=2)
    with pytest.raises(ValueError, match=r"the expert fails task long_horizon/\S+ in this harness \(stop: max_summ"):
        check_summaries(tasks, tiny_base["data"], renderer, sized(max_summaries=0), "long_horizon")


@pytest.mark.parametrize("resource", ["GPU", "rollout"])
def test_a_local_run_asking_for_what_this_machine_lacks_exits_2_before_it_starts(
    resource: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from tests.conftest import run_cli

    t0 = time.monotonic()
    rc = run_cli("run", "recipe=tiny_smoke", "stages.rl.mode=async", f"+stages.rl.placement.rollout.{resource}=1",
                 "--output-dir", str(tmp_path / "run"))  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and time.monotonic() - t0 < 30 and not (tmp_path / "run").exists()
    assert f"stages.rl.placement.rollout asks for 1 {resource} per actor" in err and "placement=none" in err
