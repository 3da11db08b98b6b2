"""The episode loop with scripted policies: parallel calls, malformed turns, budgets, the record."""

import time

import pytest
from pydantic import BaseModel, ConfigDict

from harnessrl.config import Budgets
from harnessrl.harness.episode import AssistantTurn, Trajectory, run_episode
from harnessrl.harness.protocol import render_calls
from harnessrl.harness.sandbox import Sandbox, SandboxLimits, create_workspace, remove_workspace
from harnessrl.harness.tools import ALL_TOOLS, Tool, ToolContext, select

UID = 61113
from tests.conftest import SANDBOX_OK as HAS_BWRAP  # noqa: E402
from tests.conftest import needs_bwrap  # noqa: E402


@pytest.fixture
def ctx(tmp_path):
    snap = tmp_path / "snap"
    snap.mkdir()
    (snap / "app.py").write_text("def greet():\n    return 'helo'\n")
    ws = create_workspace(snap, tmp_path / "ws", owner_uid=UID)
    box = Sandbox(ws, SandboxLimits(wall_s=10), uid=UID) if HAS_BWRAP else None
    yield ToolContext(workspace=ws, sandbox=box, output_chars=2000)
    remove_workspace(ws)


class Scripted:
    """A policy that plays back turns, recording what it was shown."""

    def __init__(self, turns, delay_s=0.0):
        self.turns = list(turns)
        self.seen = []
        self.delay_s = delay_s

    def __call__(self, messages, tools, max_tokens):
        self.seen.append((len(messages), [t["function"]["name"] for t in tools], max_tokens))
        time.sleep(self.delay_s)
        turn = self.turns.pop(0) if self.turns else render_calls([("list_dir", {})])
        return turn if isinstance(turn, AssistantTurn) else AssistantTurn(text=turn)


def fixed_greeting(workspace, answer):
    ok = "'hello'" in (workspace / "app.py").read_text()
    return ok, {"answer": answer, "fixed": ok}


def test_full_episode_record(ctx):
    tools = select(["list_dir", "read_file", "edit_file", "ask_user", "finish"])
    ctx.ask_user = lambda q: "yes, fix the typo"
    policy = Scripted(
        [
            AssistantTurn(
                text=render_calls([("list_dir", {}), ("read_file", {"path": "app.py"})]),
                token_ids=[1, 2, 3],
                logprobs=[-0.1, -0.2, -0.3],
            ),
            "I will edit <tool_call>{not json}</tool_call>",
            render_calls([("ask_user", {"question": "fix the typo?"})]),
            render_calls(
                [
                    ("edit_file", {"path": "app.py", "old_str": "'helo'", "new_str": "'hello'"}),
                    ("read_file", {"path": "missing.py"}),
                ]
            ),
            render_calls([("finish", {"summary": "fixed the greeting"})]),
        ]
    )
    traj = run_episode(
        policy,
        "Fix the greeting.",
        tools,
        ctx,
        checker=fixed_greeting,
        system_prompt="Be brief.",
        task_id="t1",
        meta={"suite": "unit"},
    )

    assert traj.outcome.stop_reason == "end_tool" and traj.outcome.final_answer == "fixed the greeting"
    assert traj.outcome.success is True and traj.outcome.details == {
        "answer": "fixed the greeting",
        "fixed": True,
    }
    c = traj.counts
    assert (c.turns, c.tool_calls, c.parallel_turns, c.malformed_turns, c.ask_user, c.tool_errors) == (
        5,
        6,
        2,
        1,
        1,
        1,
    )
    assert [t.kind for t in traj.turns] == [
        "tool_calls",
        "malformed",
        "tool_calls",
        "tool_calls",
        "tool_calls",
    ]
    assert traj.turns[0].token_ids == [1, 2, 3] and traj.turns[0].logprobs == [-0.1, -0.2, -0.3]
    assert traj.turns[1].errors and traj.turns[1].errors[0].startswith("text outside")

    roles = [m["role"] for m in traj.messages]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
    ]
    assert traj.messages[3]["content"].startswith("app.py")  # results in call order
    assert "return 'helo'" in traj.messages[4]["content"]
    assert traj.messages[6]["content"].startswith("error: your last turn could not be run")
    assert traj.messages[8]["content"] == "yes, fix the typo"
    assert traj.messages[11]["content"].startswith("error: file not found")
    assert policy.seen[0] == (2, ["list_dir", "read_file", "edit_file", "ask_user", "finish"], 1024)  # the turn cap
    assert policy.seen[1][2] == 1024

    calls = traj.turns[3].calls
    assert [cr.name for cr in calls] == ["edit_file", "read_file"] and [cr.error for cr in calls] == [
        False,
        True,
    ]
    assert all(cr.duration_s >= 0 and cr.start_s >= 0 for t in traj.turns for cr in t.calls)
    assert traj.reward_components == {} and traj.meta == {"suite": "unit"} and traj.task_id == "t1"

    line = traj.to_jsonl()
    assert line.endswith("\n") and "\n" not in line[:-1]
    assert Trajectory.model_validate_json(line) == traj


def test_final_text_answer_goes_to_checker(ctx):
    seen = {}

    def checker(workspace, answer):
        seen["answer"] = answer
        return answer == "42", {}

    traj = run_episode(Scripted(["<think>easy</think> 42"]), "6*7?", select(["answer"]), ctx, checker=checker)
    assert traj.outcome.stop_reason == "final" and traj.outcome.success is True and seen == {"answer": "42"}
    assert traj.turns[0].reasoning == "easy"
    traj = run_episode(
        Scripted([render_calls([("answer", {"text": "41"})])]),
        "6*7?",
        select(["answer"]),
        ctx,
        checker=checker,
    )
    assert traj.outcome.stop_reason == "end_tool" and traj.outcome.success is False and seen == {"answer": "41"}


@needs_bwrap
def test_calls_in_one_turn_run_in_parallel(ctx):
    sleepy = render_calls(
        [
            ("run_terminal", {"command": "sleep 0.6; echo A"}),
            ("run_terminal", {"command": "sleep 0.6; echo B"}),
            ("run_terminal", {"command": "echo C"}),
        ]
    )
    traj = run_episode(Scripted([sleepy, "done"]), "go", select(["run_terminal"]), ctx)
    calls = traj.turns[0].calls
    assert [c.output.split("\n")[1] for c in calls] == ["A", "B", "C"]  # call order, not finish order
    a, b, _ = calls
    assert a.start_s < b.start_s + b.duration_s and b.start_s < a.start_s + a.duration_s  # they overlapped
    assert traj.wall_s < 1.1


def test_budgets(ctx):
    tools = select(["list_dir"])
    traj = run_episode(Scripted([]), "loop", tools, ctx, budgets=Budgets(max_turns=3))
    assert traj.outcome.stop_reason == "max_turns" and traj.counts.turns == 3
    assert traj.outcome.success is None and traj.outcome.final_answer is None

    many = AssistantTurn(text=render_calls([("list_dir", {})]), token_ids=list(range(40)))
    policy = Scripted([many] * 10)
    traj = run_episode(policy, "loop", tools, ctx, budgets=Budgets(max_tokens=100))
    assert traj.outcome.stop_reason == "max_tokens" and traj.counts.tokens == 120 and traj.counts.turns == 3
    assert [s[2] for s in policy.seen] == [100, 60, 20]  # the policy is told what is left

    traj = run_episode(Scripted([], delay_s=0.15), "loop", tools, ctx, budgets=Budgets(wall_s=0.4))
    assert traj.outcome.stop_reason == "wall_clock" and 2 <= traj.counts.turns <= 4


def test_too_many_calls_in_a_turn_is_malformed(ctx):
    turn = render_calls([("list_dir", {})] * 3)
    traj = run_episode(Scripted([turn, "ok"]), "x", select(["list_dir"]), ctx, budgets=Budgets(max_calls_per_turn=2))
    assert traj.counts.malformed_turns == 1 and traj.counts.tool_calls == 0
    assert "at most 2" in traj.messages[2]["content"]


def test_tool_and_checker_failures_do_not_end_the_run(ctx):
    class NoArgs(BaseModel):
        model_config = ConfigDict(extra="forbid")

    def explode(c, a):
        raise RuntimeError("kaboom")

    tools = {"boom": Tool("boom", "Fails.", NoArgs, explode), "list_dir": ALL_TOOLS["list_dir"]}

    def bad_checker(workspace, answer):
        raise ValueError("checker bug")

    turn = render_calls([("boom", {}), ("list_dir", {})])
    traj = run_episode(Scripted([turn, "done"]), "x", tools, ctx, checker=bad_checker)
    assert traj.turns[0].calls[0].output == "error: the tool failed internally (RuntimeError: kaboom)"
    assert traj.turns[0].calls[1].output == "app.py" and traj.counts.tool_errors == 1
    assert traj.outcome.stop_reason == "final" and traj.outcome.success is False
    assert traj.outcome.details == {"checker_error": "ValueError: checker bug"}


def test_policy_errors_propagate(ctx):
    def broken(messages, tools, max_tokens):
        raise ConnectionError("engine down")

    with pytest.raises(ConnectionError):
        run_episode(broken, "x", select(["list_dir"]), ctx)


def test_tool_output_is_capped_in_the_record(ctx):
    (ctx.workspace / "big.txt").write_text("word " * 10_000)
    ctx.output_chars = 500
    traj = run_episode(
        Scripted([render_calls([("read_file", {"path": "big.txt"})]), "ok"]), "x", select(["read_file"]), ctx
    )
    out = traj.turns[0].calls[0].output
    assert (
        len(out) <= 500
        and "[... truncated" in out
        and "start_line/end_line" in out
        and traj.messages[2]["content"] == out
    )


def test_harness_does_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys, harnessrl.harness.episode, harnessrl.harness.tools, harnessrl.harness.sandbox\n"
        "assert 'torch' not in sys.modules, 'harness imported torch'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
