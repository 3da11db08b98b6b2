"""The tool-call protocol (Hermes/Qwen convention): rendering tools and calls, parsing assistant turns.

The model calls tools by writing, anywhere in its turn and possibly several times,

    <tool_call>
    {"name": "read_file", "arguments": {"path": "src/app.py"}}
    </tool_call>

Calls in one turn are independent; the harness runs them in parallel and returns the results in
order, one <tool_response> each. A turn with no tags is the final answer. Everything else is
malformed, and the errors go back to the model; a turn is never silently dropped or repaired, so
what the model is trained on is exactly what it wrote. A leading <think>...</think> block (Qwen3
reasoning) is set aside before classifying.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from harnessrl.harness.tools import Tool

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
_TAGS = re.compile(r"</?tool_call>|</?tool_response>")
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


def _short(s: str, n: int = 80) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 3] + "..."


def _parse_call(i: int, body: str, tools: Mapping[str, Tool]) -> tuple[ToolCall | None, list[str]]:
    """One <tool_call> body -> a validated call, or the errors that say why not. Call i is 1-based."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return None, [f"call {i}: invalid JSON ({e.msg} at line {e.lineno} column {e.colno}): {_short(body)!r}"]
    except (ValueError, RecursionError) as e:  # e.g. integers too long to convert, absurd nesting
        return None, [f"call {i}: invalid JSON ({type(e).__name__})"]
    if not isinstance(obj, dict):
        got = type(obj).__name__
        return None, [f'call {i}: expected a JSON object {{"name": ..., "arguments": {{...}}}}, got {got}']
    errors = []
    extra = sorted(set(obj) - {"name", "arguments"})
    if extra:
        errors.append(f"call {i}: unexpected keys {extra}; a call has only 'name' and 'arguments'")
    name = obj.get("name")
    if name is None:
        errors.append(f"call {i}: missing 'name'")
    elif not isinstance(name, str):
        errors.append(f"call {i}: 'name' must be a string, got {type(name).__name__}")
    elif name not in tools:
        errors.append(f"call {i}: unknown tool {_short(name, 40)!r}; available: {', '.join(tools)}")
    arguments = obj.get("arguments", {})
    if not isinstance(arguments, dict):
        errors.append(f"call {i}: 'arguments' must be a JSON object, got {type(arguments).__name__}")
    if errors:
        return None, errors
    try:
        tools[name].args.model_validate(arguments)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}" for err in e.errors()
        )
        return None, [f"call {i} ({name}): invalid arguments: {problems}"]
    return ToolCall(name=name, arguments=arguments), []


def _classify(text: str, tools: Mapping[str, Tool], max_calls: int) -> ParsedTurn:
    reasoning = None
    errors: list[str] = []
    m = _THINK.match(text)
    if m and CALL_OPEN not in m.group(1) and CALL_CLOSE not in m.group(1):
        reasoning, text = m.group(1).strip(), text[m.end() :]
    elif text.lstrip().startswith("<think>"):
        errors.append("<think> is never closed with </think>")
    if "<think>" in text or "</think>" in text:
        errors.append("<think> and </think> may appear only once, at the start of the turn")

    bodies: list[str] = []
    outside: list[str] = []
    pos, open_at = 0, None
    for tag in _TAGS.finditer(text):
        t = tag.group()
        if t in (RESPONSE_OPEN, RESPONSE_CLOSE):
            errors.append(f"the turn contains {t}; tool responses come from the harness, never the model")
        elif t == CALL_OPEN:
            if open_at is not None:
                errors.append(f"call {len(bodies) + 1}: {CALL_OPEN} opened again before {CALL_CLOSE}")
            else:
                outside.append(text[pos : tag.start()])
            open_at = tag.end()
        elif open_at is None:
            errors.append(f"stray {CALL_CLOSE} with no open {CALL_OPEN} (after {len(bodies)} complete calls)")
            outside.append(text[pos : tag.start()])
            pos = tag.end()
        else:
            bodies.append(text[open_at : tag.start()])
            open_at, pos = None, tag.end()
    if open_at is not None:
        errors.append(f"call {len(bodies) + 1}: {CALL_OPEN} is never closed with {CALL_CLOSE}")
    else:
        outside.append(text[pos:])

    if not errors and not _TAGS.search(text):
        if not text.strip():
            return ParsedTurn(
                kind="malformed",
                reasoning=reasoning,
                errors=["empty turn: write tool calls or a final answer"],
            )
        return ParsedTurn(kind="final", final_text=text.strip(), reasoning=reasoning)

    stray = "".join(outside).strip()
    if stray and bodies:
        errors.append(
            f"text outside the tool calls: {_short(stray)!r}; a turn is either tool calls only or a final answer only"
        )
    if len(bodies) > max_calls:
        errors.append(f"{len(bodies)} tool calls in one turn; at most {max_calls} are allowed")
    calls: list[ToolCall] = []
    for i, body in enumerate(bodies, 1):
        call, call_errors = _parse_call(i, body, tools)
        errors += call_errors
        if call is not None:
            calls.append(call)
    if errors:
        return ParsedTurn(kind="malformed", reasoning=reasoning, errors=errors)
    if not calls:  # only a stray response tag etc. would get here, and that is an error above
        return ParsedTurn(kind="malformed", reasoning=reasoning, errors=["no tool calls found"])
    return ParsedTurn(kind="tool_calls", calls=calls, reasoning=reasoning)


def parse_turn(text: str, tools: Mapping[str, Tool], max_calls: int = 8) -> ParsedTurn:
    """Classify one assistant turn as tool_calls, final or malformed. Never raises."""
    try:
        if not isinstance(text, str):
            return ParsedTurn(kind="malformed", errors=[f"turn is {type(text).__name__}, not text"])
        return _classify(text, tools, max_calls)
    except Exception as e:
        return ParsedTurn(kind="malformed", errors=[f"could not parse the turn ({type(e).__name__})"])


def render_errors(parsed: ParsedTurn) -> str:
    """What the model reads after a malformed turn."""
    lines = "\n".join(f"- {e}" for e in parsed.errors)
    return (
        f"error: your last turn could not be run:\n{lines}\n"
        f'Write each call as {CALL_OPEN}{{"name": ..., "arguments": {{...}}}}{CALL_CLOSE}, '
        "or answer in plain text with no tags."
    )


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


def _call_json(name: str, arguments: dict[str, Any]) -> str:
    s = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    # An argument containing a literal tag (e.g. editing this very file) would end the call early;
    # "<" only occurs inside JSON strings here, so escaping it as \u003c keeps the JSON identical.
    if _TAGS.search(s) or "think>" in s:
        s = s.replace("<", "\\u003c")
    return s


def render_calls(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """An assistant turn making these calls, as a model should write it (used by scripted policies)."""
    return "\n".join(f"{CALL_OPEN}\n{_call_json(n, a)}\n{CALL_CLOSE}" for n, a in calls)


def render_tool_responses(outputs: list[str]) -> str:
    """Tool results as raw text, one block per call in call order (what Qwen's chat template makes
    of consecutive role="tool" messages)."""
    return "\n".join(f"{RESPONSE_OPEN}\n{o}\n{RESPONSE_CLOSE}" for o in outputs)


def tool_messages(outputs: list[str]) -> list[dict[str, str]]:
    """Tool results as chat messages, one per call in call order."""
    return [{"role": "tool", "content": o} for o in outputs]
