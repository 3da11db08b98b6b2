"""Context management in the harness: summaries start new segments, truncation drops whole turns, and
each of the three token budgets (turn, episode, context) is its own, recorded, stop reason."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harnessrl.config import Budgets, ContextConfig
from harnessrl.harness.context import SUMMARIZE_REQUEST
from harnessrl.harness.episode import AssistantTurn, run_episode
from harnessrl.harness.protocol import render_calls
from harnessrl.harness.sandbox import create_workspace, remove_workspace
from harnessrl.harness.tools import ToolContext, select

READ = render_calls([("read_file", {"path": "a.py"})])
TOOLS = select(["read_file", "list_dir"])


def per_message(messages, tools) -> int:
    """A counter the tests can reason about: 10 tokens a message."""
    return 10 * len(messages)


@pytest.fixture
def ctx(tmp_path):
    snap = tmp_path / "snap"
    snap.mkdir()
    (snap / "a.py").write_text("X = 1\n")
    ws = create_workspace(snap, tmp_path / "ws", method="copy")
    yield ToolContext(workspace=ws)
    remove_workspace(ws)


class Script:
    """Plays back turns; a summary request is answered with the next entry of `summaries`."""

    def __init__(self, turns, summaries=()):
        self.turns, self.summaries = list(turns), list(summaries)
        self.calls = []  # (messages as seen, max_tokens)

    def __call__(self, messages, tools, max_tokens):
        self.calls.append(([dict(m) for m in messages], max_tokens))
        if messages[-1]["content"] == SUMMARIZE_REQUEST:
            text = self.summaries.pop(0)
            return text if isinstance(text, AssistantTurn) else AssistantTurn(text=text)
        turn = self.turns.pop(0) if self.turns else READ
        return turn if isinstance(turn, AssistantTurn) else AssistantTurn(text=turn)


def summarize(trigger: int = 60, budget: int = 200, max_summaries: int = 3, cap: int = 20) -> ContextConfig:
    return ContextConfig(policy="summarize", budget=budget, trigger=trigger, summary_max_tokens=cap,
                         max_summaries=max_summaries)  # fmt: skip


def test_a_summary_starts_a_new_segment_from_the_task_and_its_state(ctx):
    policy = Script([READ, READ, READ, "X is 1"], summaries=["X = 1"])
    traj = run_episode(policy, "what is X?", TOOLS, ctx, system_prompt="sys", count_tokens=per_message,
                       budgets=Budgets(max_turns=10, context=summarize()))  # fmt: skip
    # 2 opening messages + 2 turns of 2 messages = 60 tokens: the trigger, so turn 3 is the summary.
    assert [t.kind for t in traj.turns] == ["tool_calls", "tool_calls", "summary", "tool_calls", "final"]
    assert [t.segment for t in traj.turns] == [0, 0, 0, 1, 1]
    asked, cap = policy.calls[2]
    assert asked[-1] == {"role": "user", "content": SUMMARIZE_REQUEST} and cap == 20  # the summary's own cap
    after, _ = policy.calls[3]
    assert [m["content"] for m in after[:2]] == ["sys", "what is X?"]
    assert after[2]["role"] == "user" and "Summary 1:\nX = 1\n" in after[2]["content"] and len(after) == 3
    (c,) = traj.compactions
    assert (c.kind, c.before_turn, c.summary_turn, c.tokens_before, c.tokens_after) == ("summarize", 3, 2, 60, 30)
    first, second = traj.segments()
    assert first[-2:] == [{"role": "user", "content": SUMMARIZE_REQUEST}, {"role": "assistant", "content": "X = 1"}]
    assert second[:3] == after and second[-1] == {"role": "assistant", "content": "X is 1"}
    assert traj.counts.summaries == 1 and traj.counts.turns == 4  # a summary is not a turn
    assert traj.outcome.stop_reason == "final" and traj.outcome.final_answer == "X is 1"


def test_past_max_summaries_the_episode_ends_and_says_so(ctx):
    policy = Script([READ] * 20, summaries=["notes"] * 5)
    traj = run_episode(policy, "q", TOOLS, ctx, count_tokens=per_message,
                       budgets=Budgets(max_turns=30, context=summarize(trigger=40, max_summaries=2)))  # fmt: skip
    assert traj.counts.summaries == 2 and len(traj.compactions) == 2
    assert traj.outcome.stop_reason == "max_summaries"


def test_no_summary_is_asked_for_before_a_turn(ctx):
    """An opening (system prompt, tools, task) at the trigger leaves nothing to summarize: the episode
    ends on its context budget at once, never with a summary of nothing (the stage refuses such a
    config before it starts: components/rl.py check_context)."""
    policy = Script([READ] * 5, summaries=["notes"] * 5)
    traj = run_episode(policy, "q", TOOLS, ctx, system_prompt="s", count_tokens=per_message,
                       budgets=Budgets(context=summarize(trigger=20)))  # fmt: skip
    assert traj.turns == [] and policy.calls == [] and traj.outcome.stop_reason == "context_budget"


def test_a_summary_that_fills_the_trigger_again_ends_the_episode(ctx):
    # 3 messages after the summary (system, task, state) = 30 tokens: at the trigger before any turn.
    policy = Script([READ] * 5, summaries=["notes"] * 5)
    traj = run_episode(policy, "q", TOOLS, ctx, system_prompt="s", count_tokens=per_message,
                       budgets=Budgets(context=summarize(trigger=30)))  # fmt: skip
    assert [t.kind for t in traj.turns] == ["tool_calls", "summary"]
    assert traj.outcome.stop_reason == "context_budget" and traj.counts.summaries == 1


def test_a_malformed_or_capped_summary_is_recorded_never_dropped(ctx):
    bad = AssistantTurn(text=READ, token_ids=[1, 2], logprobs=[-0.1, -0.2], finish="length")
    policy = Script([READ, READ, "done"], summaries=[bad])
    traj = run_episode(policy, "q", TOOLS, ctx, system_prompt="s", count_tokens=per_message,
                       budgets=Budgets(context=summarize()))  # fmt: skip
    summary = traj.turns[2]
    assert summary.kind == "summary" and summary.capped and summary.token_ids == [1, 2]
    assert summary.errors == ["a summary has no tool calls; they were not run"] and not summary.calls
    assert traj.counts.malformed_turns == 1 and traj.counts.capped_turns == 1 and traj.counts.summary_tokens == 2


def test_truncation_drops_the_oldest_whole_turns(ctx):
    policy = Script([render_calls([("read_file", {"path": "a.py"}), ("list_dir", {})])] * 3 + ["X is 1"])
    budgets = Budgets(max_turns=4, max_turn_tokens=10, context=ContextConfig(policy="truncate", budget=80))
    traj = run_episode(policy, "q", TOOLS, ctx, system_prompt="s", count_tokens=per_message, budgets=budgets)
    seen = [m for m, _ in policy.calls]
    # A turn with two calls is 3 messages; before turn 3 the context would be 2 + 6 = 8 messages (80 + a
    # 10-token turn > 80), so turn 1 goes, with both its results, and turn 2 stays whole.
    assert [m["role"] for m in seen[2]] == ["system", "user", "assistant", "tool", "tool"]
    assert all(not (m["role"] == "tool" and seen[2][i - 1]["role"] == "user") for i, m in enumerate(seen[2]))
    assert [(c.kind, c.dropped_turns) for c in traj.compactions] == [("truncate", 1), ("truncate", 1)]
    assert len(traj.messages) == 2 + 3 * 3 + 1  # the transcript keeps everything
    assert traj.outcome.stop_reason == "final"


def test_without_management_a_full_context_ends_the_episode(ctx):
    budgets = Budgets(max_turns=10, max_turn_tokens=10, context=ContextConfig(policy="none", budget=45))
    traj = run_episode(Script([READ] * 10), "q", TOOLS, ctx, count_tokens=per_message, budgets=budgets)
    assert traj.outcome.stop_reason == "context_budget" and traj.counts.turns == 2
    # The last turn got only what was left of the context, not its whole cap.
    policy = Script([READ] * 10)
    run_episode(policy, "q", TOOLS, ctx, count_tokens=per_message, budgets=budgets)
    assert [cap for _, cap in policy.calls] == [10, 10]


def test_the_turn_cap_and_the_episode_cap_are_separate_budgets(ctx):
    long_turn = AssistantTurn(text=READ, token_ids=[7] * 10, logprobs=[0.0] * 10, finish="length")
    policy = Script([long_turn] * 5)
    traj = run_episode(policy, "q", TOOLS, ctx, budgets=Budgets(max_turn_tokens=10, max_tokens=25))
    assert [cap for _, cap in policy.calls] == [10, 10, 5]  # the per-turn cap, then what the episode has left
    assert traj.outcome.stop_reason == "max_tokens" and traj.counts.capped_turns == 3
    assert all(t.capped for t in traj.turns)


def test_prompts_are_stored_as_deltas_and_rebuilt_exactly(ctx):
    turns = [
        AssistantTurn(text=READ, prompt_ids=[1, 2, 3], token_ids=[4, 5], logprobs=[0.0, 0.0]),
        AssistantTurn(text=READ, prompt_ids=[1, 2, 3, 4, 5, 6, 7], token_ids=[8], logprobs=[0.0]),
        AssistantTurn(text="a", prompt_ids=[1, 2, 9], token_ids=[10], logprobs=[0.0]),  # not an extension
    ]
    traj = run_episode(Script(turns), "q", TOOLS, ctx)
    assert [(t.prompt_reused, t.prompt_ids) for t in traj.turns] == [(0, [1, 2, 3]), (5, [6, 7]), (2, [9])]
    assert traj.prompts() == [[1, 2, 3], [1, 2, 3, 4, 5, 6, 7], [1, 2, 9]]
    assert traj.model_validate_json(traj.model_dump_json()).prompts() == traj.prompts()


def test_context_configs_that_cannot_work_are_refused():
    with pytest.raises(ValidationError, match="needs a budget"):
        ContextConfig(policy="truncate")
    with pytest.raises(ValidationError, match="needs a trigger"):
        ContextConfig(policy="summarize", budget=100)
    with pytest.raises(ValidationError, match="summary turn must fit"):
        ContextConfig(policy="summarize", budget=100, trigger=90, summary_max_tokens=20)


def chars(messages, tools) -> int:
    return sum(len(m["content"]) for m in messages)


def test_past_the_trigger_nothing_is_dropped_and_the_summary_gets_the_room_left(ctx):
    """The bug LESSONS found: a context past the trigger with less than a whole summary's cap left was
    truncated before the policy summarized, so the first search result was gone before any summary
    could carry it. Now every turn stays, and the summary is capped at the room under the budget."""
    policy = Script([READ, READ, "X is 1"], summaries=["X = 1"])
    # 2 opening messages + 2 turns = 60 tokens (the trigger); with the request, 70: 10 left of 80.
    traj = run_episode(policy, "what is X?", TOOLS, ctx, system_prompt="s", count_tokens=per_message,
                       budgets=Budgets(context=summarize(trigger=60, budget=80, cap=20)))  # fmt: skip
    asked, cap = policy.calls[2]
    assert len(asked) == 7 and cap == 10  # nothing dropped; the cap is the room left, not 20
    assert [c.kind for c in traj.compactions] == ["summarize"]
    assert traj.outcome.stop_reason == "final"


def test_a_context_past_the_budget_drops_old_turns_to_make_room_for_the_summary(ctx):
    (ctx.workspace / "big.py").write_text("Y = 2\n" * 43)  # a tool result that carries the context past the budget
    policy = Script([render_calls([("list_dir", {})]), render_calls([("read_file", {"path": "big.py"})]), "2"],
                    summaries=["Y = 2"])  # fmt: skip
    context = ContextConfig(policy="summarize", budget=720, trigger=200, summary_max_tokens=20)
    traj = run_episode(policy, "what is Y?", TOOLS, ctx, system_prompt="s", count_tokens=chars,
                       budgets=Budgets(context=context))  # fmt: skip
    truncation, summary = traj.compactions
    assert truncation.kind == "truncate" and truncation.dropped_turns == 1  # the list_dir turn made room
    assert truncation.tokens_before >= 720
    assert summary.kind == "summarize" and summary.summary_turn == 2
    asked, cap = policy.calls[2]
    assert [m["role"] for m in asked] == ["system", "user", "assistant", "tool", "user"] and cap == 20
    assert chars(asked, []) + cap <= 720
    assert traj.outcome.stop_reason == "final" and traj.outcome.final_answer == "2"
