"""The episode loop: policy turn -> parse -> run the calls (in parallel) -> feed back results, until the
policy answers or a budget runs out; then check the workspace and return the trajectory record.

The record is the one thing that flows on (to rewards, the RL buffer, SFT data, eval reports), so it
keeps everything: the messages exactly as the policy saw them, each turn's token ids and logprobs
when the engine supplied them, per-call timings, counts, and the checked outcome. Rewards fill
`reward_components` later; the harness knows nothing of RL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from harnessrl.harness.protocol import (
    ParsedTurn,
    ToolCall,
    parse_turn,
    render_errors,
    render_tools,
    tool_messages,
)
from harnessrl.harness.tools import Tool, ToolContext, ToolError, truncate


class AssistantTurn(BaseModel):
    """What a policy returns for one turn. Engines that sample supply token ids and logprobs."""

    model_config = ConfigDict(extra="forbid")
    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


class Policy(Protocol):
    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int) -> AssistantTurn:
        """The next assistant turn. `tools` is the OpenAI-format list (for a chat template's
        `tools=`); `max_tokens` is what is left of the episode's token budget."""
        ...


# (workspace, final answer or None) -> (success, details). Raising counts as failure.
Checker = Callable[[Path, str | None], tuple[bool, dict[str, Any]]]


class Budgets(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_turns: int = 30
    max_tokens: int = 32768  # generated tokens over the episode (len(text)//4 when no token ids)
    wall_s: float = 900.0  # checked between turns; commands are also cut off at the deadline
    max_calls_per_turn: int = 8
    max_parallel: int = 8  # threads running one turn's calls


class CallRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any]
    output: str
    error: bool
    start_s: float  # since the episode started
    duration_s: float


class TurnRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int
    kind: Literal["tool_calls", "final", "malformed"]
    text: str
    reasoning: str | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    calls: list[CallRecord] = []
    errors: list[str] = []
    policy_s: float


class Counts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turns: int = 0
    tool_calls: int = 0
    parallel_turns: int = 0  # turns with more than one call
    malformed_turns: int = 0
    tool_errors: int = 0
    ask_user: int = 0
    tokens: int = 0


class Outcome(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stop_reason: Literal["final", "end_tool", "max_turns", "max_tokens", "wall_clock"]
    final_answer: str | None = None
    success: bool | None = None  # None when no checker was given
    details: dict[str, Any] = {}


class Trajectory(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    turns: list[TurnRecord]
    counts: Counts
    outcome: Outcome
    budgets: Budgets
    wall_s: float
    started_at: float  # unix time
    meta: dict[str, Any] = {}
    reward_components: dict[str, float] = Field(default_factory=dict)  # filled by rewards, later

    def to_jsonl(self) -> str:
        return self.model_dump_json() + "\n"


def _run_call(call: ToolCall, tool: Tool, ctx: ToolContext, t0: float) -> CallRecord:
    start = time.monotonic()
    try:
        output, error = tool.run(ctx, tool.args.model_validate(call.arguments)), False
    except ToolError as e:
        output, error = f"error: {e}", True
    except Exception as e:
        output, error = f"error: the tool failed internally ({type(e).__name__}: {e})", True
    end = time.monotonic()
    return CallRecord(
        name=call.name,
        arguments=call.arguments,
        output=truncate(output, ctx.output_chars),
        error=error,
        start_s=start - t0,
        duration_s=end - start,
    )


def _run_calls(
    calls: list[ToolCall], tools: Mapping[str, Tool], ctx: ToolContext, t0: float, max_parallel: int
) -> list[CallRecord]:
    # Calls in one turn are independent by protocol, so they run concurrently; results keep call order.
    # Plain threads, the first call on this one: a pool per turn costs about 1 ms, more than a call.
    records: list[CallRecord | None] = [None] * len(calls)

    def run(i: int) -> None:
        records[i] = _run_call(calls[i], tools[calls[i].name], ctx, t0)

    for start in range(0, len(calls), max_parallel):
        idx = range(start, min(start + max_parallel, len(calls)))
        threads = [threading.Thread(target=run, args=(i,)) for i in idx[1:]]
        for t in threads:
            t.start()
        run(idx[0])
        for t in threads:
            t.join()
    return records  # type: ignore[return-value]


def _check(checker: Checker | None, workspace: Path, answer: str | None) -> tuple[bool | None, dict[str, Any]]:
    if checker is None:
        return None, {}
    try:
        success, details = checker(workspace, answer)
        return bool(success), dict(details)
    except Exception as e:
        return False, {"checker_error": f"{type(e).__name__}: {e}"}


def run_episode(
    policy: Policy,
    prompt: str,
    tools: Mapping[str, Tool],
    ctx: ToolContext,
    checker: Checker | None = None,
    budgets: Budgets | None = None,
    system_prompt: str | None = None,
    task_id: str = "",
    meta: dict[str, Any] | None = None,
) -> Trajectory:
    """Run one episode in `ctx.workspace` and return its trajectory. Exceptions from the policy
    propagate (an engine failure is not the model's fault and must not become a zero reward)."""
    budgets = budgets or Budgets()
    started_at, t0 = time.time(), time.monotonic()
    ctx.deadline = t0 + budgets.wall_s
    rendered_tools = render_tools(tools)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": prompt})
    turns: list[TurnRecord] = []
    counts = Counts()
    final_answer: str | None = None

    while True:
        if counts.turns >= budgets.max_turns:
            stop = "max_turns"
            break
        if counts.tokens >= budgets.max_tokens:
            stop = "max_tokens"
            break
        if time.monotonic() >= ctx.deadline:
            stop = "wall_clock"
            break

        p0 = time.monotonic()
        turn = policy(messages, rendered_tools, budgets.max_tokens - counts.tokens)
        policy_s = time.monotonic() - p0
        counts.turns += 1
        counts.tokens += len(turn.token_ids) if turn.token_ids is not None else len(turn.text) // 4
        messages.append({"role": "assistant", "content": turn.text})
        parsed: ParsedTurn = parse_turn(turn.text, tools, budgets.max_calls_per_turn)
        record = TurnRecord(
            index=counts.turns - 1,
            kind=parsed.kind,
            text=turn.text,
            reasoning=parsed.reasoning,
            token_ids=turn.token_ids,
            logprobs=turn.logprobs,
            errors=parsed.errors,
            policy_s=policy_s,
        )
        turns.append(record)

        if parsed.kind == "final":
            final_answer, stop = parsed.final_text, "final"
            break
        if parsed.kind == "malformed":
            counts.malformed_turns += 1
            messages += tool_messages([render_errors(parsed)])
            continue

        record.calls = _run_calls(parsed.calls, tools, ctx, t0, budgets.max_parallel)
        messages += tool_messages([c.output for c in record.calls])
        counts.tool_calls += len(record.calls)
        counts.parallel_turns += len(record.calls) > 1
        counts.tool_errors += sum(c.error for c in record.calls)
        counts.ask_user += sum(c.name == "ask_user" for c in record.calls)
        enders = [c for c in parsed.calls if tools[c.name].ends_episode]
        if enders:
            args = enders[-1].arguments  # answer(text) or finish(summary)
            final_answer = args.get("text", args.get("summary"))
            stop = "end_tool"
            break

    success, details = _check(checker, ctx.workspace, final_answer)
    return Trajectory(
        task_id=task_id,
        messages=messages,
        tools=rendered_tools,
        turns=turns,
        counts=counts,
        outcome=Outcome(stop_reason=stop, final_answer=final_answer, success=success, details=details),
        budgets=budgets,
        wall_s=time.monotonic() - t0,
        started_at=started_at,
        meta=meta or {},
    )
