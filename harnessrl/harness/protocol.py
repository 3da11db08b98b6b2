"""The tool-call protocol: rendering tools and calls, parsing and classifying assistant turns.

The model calls tools in its own format (harnessrl/harness/formats/; Hermes by default), e.g.

    <tool_call>
    {"name": "read_file", "arguments": {"path": "src/app.py"}}
    </tool_call>

possibly several times in a turn. Calls in one turn are independent; the harness runs them in parallel and returns the results in
order, one tool message each. A turn with no call syntax is the final answer. Everything else is
malformed, and the errors go back to the model; a turn is never silently dropped or repaired, so
what the model is trained on is exactly what it wrote. A leading <think>...</think> block (Qwen3
reasoning) is set aside before classifying.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from harnessrl.harness.formats import (
    BAD_ARGUMENTS,
    EMPTY,
    MISPLACED,
    TEXT_OUTSIDE,
    TOO_MANY_CALLS,
    UNKNOWN_TOOL,
    UNPARSEABLE,
    Problem,
    RawCall,
    hermes,
    short,
)
from harnessrl.harness.tools import Tool

CALL_OPEN, CALL_CLOSE = hermes.OPEN, hermes.CLOSE
RESPONSE_OPEN, RESPONSE_CLOSE = hermes.RESPONSE_OPEN, hermes.RESPONSE_CLOSE
_THINK = re.compile(r"\s*(?:<think>)?(.*?)</think>", re.DOTALL)


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any]


class ParsedTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["tool_calls", "final", "malformed"]
    calls: list[ToolCall] = []  # only for kind == "tool_calls"; all of them valid
    final_text: str | None = None  # only for kind == "final"
    reasoning: str | None = None  # the <think> block, if any
    errors: list[str] = []  # only for kind == "malformed"; each names the call and what is wrong
    classes: list[str] = []  # the class of each error (harnessrl/harness/formats/__init__.py)


def _check_call(i: int, call: RawCall, tools: Mapping[str, Tool]) -> tuple[ToolCall | None, list[Problem]]:
    """A call's name and arguments against the tools offered, whatever format it came in."""
    problems = []
    name, arguments = call.name, call.arguments
    if name is None:
        problems.append(Problem(UNPARSEABLE, f"call {i}: missing 'name'"))
    elif not isinstance(name, str):
        problems.append(Problem(UNPARSEABLE, f"call {i}: 'name' must be a string, got {type(name).__name__}"))
    elif name not in tools:
        problems.append(
            Problem(UNKNOWN_TOOL, f"call {i}: unknown tool {short(name, 40)!r}; available: {', '.join(tools)}")
        )
    if not isinstance(arguments, dict):
        msg = f"call {i}: 'arguments' must be a JSON object, got {type(arguments).__name__}"
        problems.append(Problem(BAD_ARGUMENTS, msg))
    if problems:
        return None, problems
    try:
        tools[name].args.model_validate(arguments)
    except ValidationError as e:
        details = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}" for err in e.errors()
        )
        return None, [Problem(BAD_ARGUMENTS, f"call {i} ({name}): invalid arguments: {details}")]
    return ToolCall(name=name, arguments=arguments), []


def _classify(text: str, tools: Mapping[str, Tool], max_calls: int, fmt: ModuleType) -> ParsedTurn:
    reasoning = None
    problems: list[Problem] = []
    m = _THINK.match(text)
    if m and not any(marker in m.group(1) for marker in fmt.MARKERS):
        reasoning, text = m.group(1).strip(), text[m.end() :]
    elif text.lstrip().startswith("<think>"):
        problems.append(Problem(MISPLACED, "<think> is never closed with </think>"))
    if "<think>" in text or "</think>" in text:
        problems.append(Problem(MISPLACED, "<think> and </think> may appear only once, at the start of the turn"))

    parts = fmt.split(text)
    problems += parts.problems
    if not problems and not parts.marked:
        if not text.strip():
            return ParsedTurn(
                kind="malformed",
                reasoning=reasoning,
                errors=["empty turn: write tool calls or a final answer"],
                classes=[EMPTY],
            )
        return ParsedTurn(kind="final", final_text=text.strip(), reasoning=reasoning)

    stray = parts.outside.strip()
    if stray and parts.bodies:
        problems.append(
            Problem(
                TEXT_OUTSIDE,
                f"text outside the tool calls: {short(stray)!r}; a turn is either tool calls only or a final answer only",
            )
        )
    if len(parts.bodies) > max_calls:
        problems.append(
            Problem(TOO_MANY_CALLS, f"{len(parts.bodies)} tool calls in one turn; at most {max_calls} are allowed")
        )
    calls: list[ToolCall] = []
    for i, body in enumerate(parts.bodies, 1):
        raw, found = fmt.decode(i, body, tools)
        problems += found
        if raw is not None:
            call, found = _check_call(i, raw, tools)
            problems += found
            if call is not None and not found:
                calls.append(call)
    if problems:
        return ParsedTurn(
            kind="malformed",
            reasoning=reasoning,
            errors=[p.message for p in problems],
            classes=[p.kind for p in problems],
        )
    if not calls:  # only a stray response tag etc. would get here, and that is an error above
        return ParsedTurn(kind="malformed", reasoning=reasoning, errors=["no tool calls found"], classes=[UNPARSEABLE])
    return ParsedTurn(kind="tool_calls", calls=calls, reasoning=reasoning)


def parse_turn(text: str, tools: Mapping[str, Tool], max_calls: int = 8, fmt: ModuleType = hermes) -> ParsedTurn:
    """Classify one assistant turn, written in tool-call format `fmt`, as tool_calls, final or
    malformed. Never raises."""
    try:
        if not isinstance(text, str):
            return ParsedTurn(
                kind="malformed", errors=[f"turn is {type(text).__name__}, not text"], classes=[UNPARSEABLE]
            )
        return _classify(text, tools, max_calls, fmt)
    except Exception as e:
        return ParsedTurn(
            kind="malformed", errors=[f"could not parse the turn ({type(e).__name__})"], classes=[UNPARSEABLE]
        )


def render_errors(parsed: ParsedTurn, fmt: ModuleType = hermes) -> str:
    """What the model reads after a malformed turn."""
    lines = "\n".join(f"- {e}" for e in parsed.errors)
    return f"error: your last turn could not be run:\n{lines}\n{fmt.HINT}"


# -- rendering ---------------------------------------------------------------------------------


def _strip_titles(schema: Any) -> Any:
    # Pydantic adds a "title" to every schema node; it is noise in the prompt. Field names under
    # "properties" are kept even if a field is called "title".
    if isinstance(schema, dict):
        return {
            k: ({n: _strip_titles(s) for n, s in v.items()} if k in ("properties", "$defs") else _strip_titles(v))
            for k, v in schema.items()
            if k != "title"
        }
    if isinstance(schema, list):
        return [_strip_titles(x) for x in schema]
    return schema


def render_tools(tools: Mapping[str, Tool]) -> list[dict[str, Any]]:
    """Tools in the OpenAI function format, which HF chat templates take as `tools=`."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": tool.description,
                "parameters": _strip_titles(tool.args.model_json_schema()),
            },
        }
        for name, tool in tools.items()
    ]


def render_tools_prompt(tools: Mapping[str, Tool]) -> str:
    """The tools section of a system prompt in Qwen2.5's wording, for engines that take raw text
    rather than a chat template with `tools=`."""
    specs = "\n".join(json.dumps(t, ensure_ascii=False) for t in render_tools(tools))
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{specs}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        f"{CALL_OPEN}{CALL_CLOSE} XML tags:\n"
        f'{CALL_OPEN}\n{{"name": <function-name>, "arguments": <args-json-object>}}\n{CALL_CLOSE}'
    )


def render_calls(calls: list[tuple[str, dict[str, Any]]], fmt: ModuleType = hermes) -> str:
    """An assistant turn making these calls, as a model should write it (used by scripted policies)."""
    return fmt.render_calls(calls)


def render_tool_responses(outputs: list[str]) -> str:
    """Tool results as raw text, one block per call in call order (what Qwen's chat template makes
    of consecutive role="tool" messages)."""
    return "\n".join(f"{RESPONSE_OPEN}\n{o}\n{RESPONSE_CLOSE}" for o in outputs)


def tool_messages(outputs: list[str]) -> list[dict[str, str]]:
    """Tool results as chat messages, one per call in call order."""
    return [{"role": "tool", "content": o} for o in outputs]
