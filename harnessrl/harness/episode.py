"""An episode: a task's snapshot becomes a fresh workspace, the policy works in the sandbox, the
task's checker decides, the workspace goes away.

`run_task` is the one call the SFT data builder, the RL rollouts, eval and the simulated users share.
Its loop, `run_episode`: policy turn -> parse -> run the calls (in parallel) -> feed back results,
until the policy answers or a budget runs out; then check the workspace and return the trajectory.

The trajectory is the one record that flows on (to rewards, the RL update, SFT data, eval reports), so
it keeps everything: the messages exactly as the policy saw them, each turn's token ids and logprobs
when the engine supplied them, per-call timings, counts, and the checked outcome. The RL loop's
scoring fills `reward_components` once; the harness knows nothing of RL.
"""

from __future__ import annotations

import itertools
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from harnessrl.config import Budgets
from harnessrl.harness.context import (
    SUMMARIZE_REQUEST,
    TokenCounter,
    approx_tokens,
    state_message,
    truncate_turns,
)
from harnessrl.harness.formats import hermes
from harnessrl.harness.protocol import (
    ParsedTurn,
    ToolCall,
    parse_turn,
    render_errors,
    render_tools,
    tool_messages,
)
from harnessrl.harness.sandbox import PYTHON, Sandbox, SandboxLimits, create_workspace, remove_workspace
from harnessrl.harness.spec import system_prompt as task_system_prompt
from harnessrl.harness.tools import Tool, ToolContext, ToolError, select, truncate
from harnessrl.sources.envs import env_python
from harnessrl.tasks.checkers import Checker, make_checker
from harnessrl.tasks.task import Task

BASE_UID = 62000  # concurrent episodes get distinct sandbox uids, so process limits stay per episode


class AssistantTurn(BaseModel):
    """What a policy returns for one turn. Engines that sample supply the exact prompt ids they were
    given, the token ids they sampled and each token's behaviour logprob."""

    model_config = ConfigDict(extra="forbid")
    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_ids: list[int] | None = None
    finish: Literal["stop", "length"] | None = None  # length: the turn ran into its token cap


class Policy(Protocol):
    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int) -> AssistantTurn:
        """The next assistant turn, at most `max_tokens` tokens long. `tools` is the OpenAI-format list
        (for a chat template's `tools=`)."""
        ...


class CallRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any]
    output: str
    error: bool
    start_s: float  # since the episode started
    duration_s: float


class TurnRecord(BaseModel):
    """One sampled turn. Its prompt is stored as a delta: the first `prompt_reused` ids are the
    previous turn's prompt and completion, `prompt_ids` the rest (Trajectory.prompts rebuilds them),
    so a long episode does not store its context once per turn."""

    model_config = ConfigDict(extra="forbid")
    index: int
    kind: Literal["tool_calls", "final", "malformed", "summary"]
    text: str
    segment: int = 0  # which context segment: each summary starts a new one
    capped: bool = False  # ended by the per-turn cap, not by the policy
    reasoning: str | None = None
    prompt_reused: int = 0
    prompt_ids: list[int] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    calls: list[CallRecord] = []
    errors: list[str] = []
    classes: list[str] = []  # the class of each error (harnessrl/harness/formats/__init__.py)
    policy_s: float


class Counts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turns: int = 0  # assistant turns, summaries not included
    tool_calls: int = 0
    parallel_turns: int = 0  # turns with more than one call
    malformed_turns: int = 0  # summaries included
    tool_errors: int = 0
    ask_user: int = 0
    tokens: int = 0  # generated, summaries included
    capped_turns: int = 0
    summaries: int = 0
    summary_tokens: int = 0


StopReason = Literal[
    "final", "end_tool", "asked", "max_turns", "max_tokens", "wall_clock", "context_budget", "max_summaries"
]
# Episodes that ran out of a budget rather than ending by the policy's own choice (SUPO's "overlong").
OVERLONG: frozenset[str] = frozenset({"max_turns", "max_tokens", "wall_clock", "context_budget", "max_summaries"})


class Outcome(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stop_reason: StopReason
    final_answer: str | None = None
    success: bool | None = None  # None when no checker was given
    details: dict[str, Any] = {}


class Compaction(BaseModel):
    """One context compaction, where it happened and what it did."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["summarize", "truncate"]
    before_turn: int  # index in `turns` of the first turn that saw the compacted context
    message: int  # index in `messages` (the transcript) of the first message after it
    tokens_before: int
    tokens_after: int
    summary_turn: int | None = None  # summarize: index in `turns` of the summary
    dropped_turns: int = 0  # truncate: whole turns dropped


class Trajectory(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    # The transcript: every message in the order it happened. Without compaction it is exactly what
    # the policy saw; a summary adds the request, the summary and the state message the next segment
    # starts from (see `segments`).
    messages: list[dict[str, Any]]
    opening: int  # how many first messages (system prompt, task) every segment starts with
    tools: list[dict[str, Any]]
    turns: list[TurnRecord]
    compactions: list[Compaction] = []
    counts: Counts
    outcome: Outcome
    budgets: Budgets
    wall_s: float
    started_at: float  # unix time
    meta: dict[str, Any] = {}
    reward_components: dict[str, float] = Field(default_factory=dict)  # filled once, by the RL loop's scoring

    def to_jsonl(self) -> str:
        return self.model_dump_json() + "\n"

    def prompts(self) -> list[list[int] | None]:
        """Each turn's exact prompt ids (None where the engine gave none), rebuilt from the deltas."""
        out: list[list[int] | None] = []
        prev: list[int] = []
        for t in self.turns:
            if t.prompt_ids is None:
                out.append(None)
                prev = []
                continue
            full = prev[: t.prompt_reused] + t.prompt_ids
            out.append(full)
            prev = full + (t.token_ids or [])
        return out

    def segments(self) -> list[list[dict[str, Any]]]:
        """The conversation of each segment as the policy saw it: the opening messages, then that
        segment's messages up to its summary (or to the end). Truncation drops turns from the live
        context but starts no segment."""
        cuts = [c.message for c in self.compactions if c.kind == "summarize"]  # each new segment's first message
        starts, ends = [self.opening, *cuts], [*cuts, len(self.messages)]
        return [self.messages[: self.opening] + self.messages[s:e] for s, e in zip(starts, ends, strict=True)]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


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


def _budget_stop(counts: Counts, budgets: Budgets, deadline: float) -> StopReason | None:
    if counts.turns >= budgets.max_turns:
        return "max_turns"
    if counts.tokens >= budgets.max_tokens:
        return "max_tokens"
    if time.monotonic() >= deadline:
        return "wall_clock"
    return None


def _summary_errors(text: str, fmt: ModuleType) -> list[str]:
    if not text.strip():
        return ["empty summary"]
    if any(marker in text for marker in fmt.MARKERS):
        return ["a summary has no tool calls; they were not run"]
    return []


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
    count_tokens: TokenCounter | None = None,
    fmt: ModuleType = hermes,
) -> Trajectory:
    """Run one episode in `ctx.workspace` and return its trajectory. `count_tokens` measures the
    context in the policy's tokens for the context policy (default: an estimate from characters);
    `fmt` is the tool-call format the policy writes (harnessrl/harness/formats/).
    Exceptions from the policy propagate (an engine failure is not the model's fault and must not
    become a zero reward)."""
    budgets = budgets or Budgets()
    managed = budgets.context
    count = count_tokens or approx_tokens
    started_at, t0 = time.time(), time.monotonic()
    ctx.deadline = t0 + budgets.wall_s
    rendered_tools = render_tools(tools)
    opening: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    opening.append({"role": "user", "content": prompt})
    context = list(opening)  # what the policy sees now
    transcript = list(opening)  # everything that happened, in order
    turns: list[TurnRecord] = []
    compactions: list[Compaction] = []
    counts = Counts()
    segment = 0
    segment_turns = 0  # counts.turns when the current segment began
    last_ids: list[int] = []  # the previous turn's prompt and completion, for the prompt delta
    final_answer: str | None = None
    request = {"role": "user", "content": SUMMARIZE_REQUEST}

    def add(*messages: dict[str, Any]) -> None:
        context.extend(messages)
        transcript.extend(messages)

    def sample(messages: list[dict[str, Any]], max_tokens: int, kind: str) -> TurnRecord:
        """One policy call, recorded and counted."""
        nonlocal last_ids
        p0 = time.monotonic()
        turn = policy(messages, rendered_tools, max_tokens)
        record = TurnRecord(index=len(turns), kind=kind, text=turn.text, segment=segment,  # type: ignore[arg-type]
                            capped=turn.finish == "length", token_ids=turn.token_ids, logprobs=turn.logprobs,
                            policy_s=time.monotonic() - p0)  # fmt: skip
        if turn.prompt_ids is not None:
            record.prompt_reused = _common_prefix(last_ids, turn.prompt_ids)
            record.prompt_ids = turn.prompt_ids[record.prompt_reused :]
            last_ids = turn.prompt_ids + (turn.token_ids or [])
        turns.append(record)
        generated = len(turn.token_ids) if turn.token_ids is not None else len(turn.text) // 4
        counts.tokens += generated
        counts.capped_turns += record.capped
        if kind == "summary":
            counts.summaries += 1
            counts.summary_tokens += generated
        return record

    while True:
        stop = _budget_stop(counts, budgets, ctx.deadline)
        if stop:
            break
        room = budgets.max_turn_tokens
        if managed.counts_tokens:
            used = count(context, rendered_tools)
            if managed.policy == "summarize" and used >= managed.trigger:  # type: ignore[operator]
                if counts.turns == segment_turns:  # no turn since the segment began: nothing to summarize,
                    stop = "context_budget"  # the opening (and summary) alone fill the context
                    break
                if counts.summaries >= managed.max_summaries:
                    stop = "max_summaries"
                    break
                # Nothing is dropped before the policy summarizes: a dropped search result is a value no
                # summary can carry. The summary gets the room left under the budget, up to its cap.
                # Only a tool result that carried the context past the budget itself, leaving no room at
                # all, drops the oldest turns until a whole summary fits, rather than lose the episode.
                asked = [*context, request]
                left = managed.budget - count(asked, rendered_tools)  # type: ignore[operator]
                if left <= 0:
                    fits = lambda m: count([*m, request], rendered_tools) + managed.summary_max_tokens <= managed.budget
                    dropped = truncate_turns(context, len(opening), fits)
                    if dropped:
                        compactions.append(Compaction(kind="truncate", before_turn=len(turns), message=len(transcript),
                                                      tokens_before=used, tokens_after=count(context, rendered_tools),
                                                      dropped_turns=dropped))  # fmt: skip
                        asked = [*context, request]
                        left = managed.budget - count(asked, rendered_tools)  # type: ignore[operator]
                cap = min(managed.summary_max_tokens, budgets.max_tokens - counts.tokens, left)
                if cap <= 0:  # even the latest turn alone leaves no room for a summary
                    stop = "context_budget"
                    break
                record = sample(asked, cap, "summary")
                record.errors = _summary_errors(record.text, fmt)
                counts.malformed_turns += bool(record.errors)  # recorded and penalised, never dropped
                state = state_message(record.text.strip(), counts.summaries, budgets.max_turns - counts.turns)
                transcript.extend([asked[-1], {"role": "assistant", "content": record.text}])
                context[:] = opening
                add(state)
                segment, segment_turns = segment + 1, counts.turns
                compactions.append(Compaction(kind="summarize", before_turn=len(turns), message=len(transcript) - 1,
                                              tokens_before=used, tokens_after=count(context, rendered_tools),
                                              summary_turn=record.index))  # fmt: skip
                continue
            if managed.policy == "truncate":
                fits = lambda m: count(m, rendered_tools) + budgets.max_turn_tokens <= managed.budget
                dropped = truncate_turns(context, len(opening), fits)
                if dropped:
                    after = count(context, rendered_tools)
                    compactions.append(Compaction(kind="truncate", before_turn=len(turns), message=len(transcript),
                                                  tokens_before=used, tokens_after=after, dropped_turns=dropped))  # fmt: skip
                    used = after
            if managed.budget is not None:
                room = min(room, managed.budget - used)
                if room <= 0:
                    stop = "context_budget"
                    break

        record = sample(context, min(room, budgets.max_tokens - counts.tokens), "tool_calls")
        counts.turns += 1
        add({"role": "assistant", "content": record.text})
        parsed: ParsedTurn = parse_turn(record.text, tools, budgets.max_calls_per_turn, fmt)
        record.kind, record.reasoning, record.errors = parsed.kind, parsed.reasoning, parsed.errors
        record.classes = parsed.classes

        if parsed.kind == "final":
            final_answer, stop = parsed.final_text, "final"
            break
        if parsed.kind == "malformed":
            counts.malformed_turns += 1
            add(*tool_messages([render_errors(parsed, fmt)]))
            continue

        record.calls = _run_calls(parsed.calls, tools, ctx, t0, budgets.max_parallel)
        add(*tool_messages([c.output for c in record.calls]))
        counts.tool_calls += len(record.calls)
        counts.parallel_turns += len(record.calls) > 1
        counts.tool_errors += sum(c.error for c in record.calls)
        counts.ask_user += sum(c.name == "ask_user" for c in record.calls)
        if ctx.ask_user is None and any(c.name == "ask_user" and not c.error for c in record.calls):
            stop = "asked"  # no simulated user: the question goes to the real one, and the turn ends
            break
        enders = [c for c in parsed.calls if tools[c.name].ends_episode]
        if enders:
            args = enders[-1].arguments  # answer(text) or finish(summary)
            final_answer = args.get("text", args.get("summary"))
            stop = "end_tool"
            break

    success, details = _check(checker, ctx.workspace, final_answer)
    return Trajectory(
        task_id=task_id,
        messages=transcript,
        opening=len(opening),
        tools=rendered_tools,
        turns=turns,
        compactions=compactions,
        counts=counts,
        outcome=Outcome(stop_reason=stop, final_answer=final_answer, success=success, details=details),
        budgets=budgets,
        wall_s=time.monotonic() - t0,
        started_at=started_at,
        meta=meta or {},
    )


# ----------------------------------------------------------------------------- a task's episode


def prompt_messages(task: Task) -> list[dict[str, str]]:
    """The conversation an episode of `task` starts from (what run_episode builds), for engines that take messages."""
    return [
        {"role": "system", "content": task_system_prompt(task.tools)},
        {"role": "user", "content": task.instruction},
    ]


def run_task(
    task: Task,
    suite_dir: Path | str,
    policy: Policy,
    budgets: Budgets,
    work_dir: Path | str | None = None,
    uid: int = BASE_UID,
    limits: SandboxLimits | None = None,
    count_tokens: TokenCounter | None = None,
    fmt: ModuleType = hermes,
) -> Trajectory:
    """One episode of `task` with `policy`, which writes tool calls in format `fmt`; the trajectory's
    outcome holds the checker's verdict.
    `count_tokens` is the policy's own context counter, for the budgets' context policy. A task with an
    environment (`task.env`) runs its tools and its check with that environment's Python."""
    python = env_python(suite_dir, task.env) if task.env else PYTHON
    with tempfile.TemporaryDirectory(prefix="episode-", dir=work_dir) as tmp:
        ws = create_workspace(Path(suite_dir) / task.repo, Path(tmp) / "ws", owner_uid=uid)
        ctx = ToolContext(
            workspace=ws,
            sandbox=Sandbox(ws, limits or SandboxLimits(), uid=uid, python=python),
            ask_user=(lambda _q, answer=task.user: answer) if task.user is not None else None,
        )
        try:
            return run_episode(
                policy,
                task.instruction,
                select(task.tools),
                ctx,
                checker=make_checker(task, python, Path(suite_dir) / task.repo),
                budgets=budgets,
                system_prompt=task_system_prompt(task.tools),
                task_id=task.id,
                meta={"suite": task.suite, "split": task.split},
                count_tokens=count_tokens,
                fmt=fmt,
            )
        finally:
            remove_workspace(ws)


def run_tasks(
    tasks: list[Task],
    suite_dir: Path | str,
    policy_for: Callable[[Task], Policy],
    budgets: Budgets,
    workers: int = 4,
    on_done: Callable[[], None] | None = None,
) -> list[Trajectory]:
    """Episodes of many tasks, `workers` at a time (threads: the work is in sandboxed subprocesses and
    the policy). Results keep task order. `policy_for(task)` gives each episode its policy; `on_done`,
    if given, is called after each episode (from its worker thread), e.g. to show progress."""
    slots = itertools.count()
    local = threading.local()

    def one(task: Task) -> Trajectory:
        if not hasattr(local, "uid"):
            local.uid = BASE_UID + next(slots)
        trajectory = run_task(task, suite_dir, policy_for(task), budgets, uid=local.uid)
        if on_done is not None:
            on_done()
        return trajectory

    if workers <= 1:
        return [one(t) for t in tasks]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, tasks))
