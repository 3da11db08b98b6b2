"""Qwen3-Coder: XML calls, one element per parameter, each value typed by the tool's JSON schema.

    <tool_call>
    <function=read_file>
    <parameter=path>
    src/app.py
    </parameter>
    </function>
    </tool_call>

A value is text: one newline after the opening tag and one before the closing tag belong to the markup.
A string parameter is written as is; any other value as JSON, which the schema turns back into an
integer, a list... as vLLM's parser does. vLLM's parser: `qwen3_coder`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from harnessrl.harness.formats import (
    UNCLOSED,
    UNPARSEABLE,
    Problem,
    RawCall,
    Split,
    properties,
    short,
    split_tags,
    typed,
)
from harnessrl.harness.tools import Tool

VLLM_PARSER = "qwen3_coder"
OPEN, CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
FUNC, FUNC_END, PARAM, PARAM_END = "<function=", "</function>", "<parameter=", "</parameter>"
TEMPLATE_MARK = FUNC
HINT = (
    f"Write each call as {OPEN}\\n{FUNC}NAME>\\n{PARAM}KEY>\\nvalue\\n{PARAM_END}\\n{FUNC_END}\\n{CLOSE}, "
    "or answer in plain text with no tags."
)
MARKERS = (OPEN, CLOSE, FUNC)
STARTS = (OPEN, FUNC)  # where a call may begin: what `serve` holds back when streaming
_TAGS = re.compile(r"</?tool_call>|</?tool_response>|<function=")


def _value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def render_calls(calls: list[tuple[str, dict[str, Any]]]) -> str:
    out = []
    for name, arguments in calls:
        params = "".join(f"{PARAM}{k}>\n{_value(v)}\n{PARAM_END}\n" for k, v in arguments.items())
        for k, v in arguments.items():
            # The format has no escapes: a value holding a closing tag could not be read back.
            if PARAM_END in _value(v) or FUNC_END in _value(v) or CLOSE in _value(v):
                raise ValueError(
                    f"{name}.{k}: a value containing {PARAM_END}, {FUNC_END} or {CLOSE} cannot be written in qwen3_coder"
                )
        out.append(f"{OPEN}\n{FUNC}{name}>\n{params}{FUNC_END}\n{CLOSE}")
    return "\n".join(out)


def split(text: str) -> Split:
    return split_tags(text, OPEN, CLOSE, _TAGS, forbidden=(RESPONSE_OPEN, RESPONSE_CLOSE))


# A body is exactly: <function=NAME> then parameters, each <parameter=KEY>value</parameter>, then
# </function>, with only whitespace between the elements.
_FUNCTION = re.compile(r"\s*<function=([^>\n]*)>(.*)", re.DOTALL)
_PARAMETER = re.compile(r"\s*<parameter=([^>\n]*)>(.*?)</parameter>", re.DOTALL)


def _trim(value: str) -> str:
    """The markup's newlines off a value: one after the opening tag, one before the closing tag."""
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


def decode(i: int, body: str, tools: Mapping[str, Tool]) -> tuple[RawCall | None, list[Problem]]:
    m = _FUNCTION.match(body)
    if not m:
        return None, [Problem(UNPARSEABLE, f"call {i}: expected {FUNC}NAME> after {OPEN}: {short(body)!r}")]
    name, rest = m.group(1).strip(), m.group(2)
    props = tools[name].args.model_json_schema().get("properties", {}) if name in tools else {}
    arguments: dict[str, Any] = {}
    pos = 0
    while (p := _PARAMETER.match(rest, pos)) is not None:
        key = p.group(1)
        if key in arguments:
            return None, [Problem(UNPARSEABLE, f"call {i}: parameter {key!r} is given twice")]
        arguments[key] = typed(_trim(p.group(2)), props[key]) if key in props else _trim(p.group(2))
        pos = p.end()
    tail = rest[pos:]
    opened = re.match(r"\s*<parameter=([^>\n]*)>", tail)
    if opened:  # a parameter whose </parameter> never comes
        return None, [Problem(UNCLOSED, f"call {i}: parameter {opened.group(1)!r} is never closed with {PARAM_END}")]
    if re.fullmatch(r"\s*</function>\s*", tail):
        return RawCall(name=name, arguments=arguments), []
    if FUNC_END not in tail:
        return None, [Problem(UNCLOSED, f"call {i}: {FUNC}{short(name, 40)}> is never closed with {FUNC_END}")]
    return None, [Problem(UNPARSEABLE, f"call {i}: unexpected text in {FUNC}{short(name, 40)}>: {short(tail)!r}")]


# -- what vLLM's parser returns ---------------------------------------------------------------

# The parser reads terminals left to right in five states (vllm/parser/qwen3.py): text outside calls,
# the preamble after <tool_call>, the name after <function=, the arguments up to </function>, and
# the gap after it. Text before the first call is the content; text in the preamble and the gap is
# dropped, and so is text after the first call.
_TERMINALS = re.compile(r"<think>|</think>|</?tool_call>|<function=|</function>|<parameter=|</parameter>|>")
_PARAM_RE = re.compile(r"<\s*parameter\s*=\s*([^>]*)>(.*?)(?:<\s*/\s*parameter\s*>|(?=<\s*parameter\s*=))", re.DOTALL)


def _params(raw: str) -> dict[str, str]:
    return {m.group(1): _trim(m.group(2)) for m in _PARAM_RE.finditer(raw)}


def extract(text: str, tools: list[dict[str, Any]] | None = None) -> tuple[str | None, list[tuple[str, str]]]:
    content: list[str] = []
    calls: list[list[str]] = []  # [name, raw arguments]
    state, pos = "content", 0
    for m in _TERMINALS.finditer(text):
        piece, t = text[pos : m.start()], m.group()
        pos = m.end()
        if state == "content":
            if not calls:
                content.append(piece)
            if t == OPEN:
                calls.append(["", ""])
                state = "preamble"
            elif t == FUNC:
                calls.append(["", ""])
                state = "name"
            elif t != "</think>" and not calls:
                content.append(t)
        elif state == "preamble":
            if t == FUNC:
                state = "name"
            elif t == CLOSE:
                state = "content"
        elif state == "name":
            calls[-1][0] += piece
            if t == ">":
                state = "args"
            elif t == FUNC_END:
                state = "between"
            else:
                calls[-1][0] += t
        elif state == "args":
            calls[-1][1] += piece
            if t == FUNC_END:
                state = "between"
            else:
                calls[-1][1] += t
        elif state == "between":
            if t == CLOSE:
                state = "content"
            elif t in (OPEN, FUNC):
                calls.append(["", ""])
                state = "preamble" if t == OPEN else "name"
    rest = text[pos:]
    if state == "content" and not calls:
        content.append(rest)
    elif state == "name":
        calls[-1][0] += rest
    elif state == "args":
        calls[-1][1] += rest
    out = []
    for name, raw in calls:
        name = name.strip()
        if not name:
            continue
        params: dict[str, Any] = _params(raw)
        props = properties(tools, name) or {}
        params = {k: typed(v, props[k]) if isinstance(props.get(k), dict) else v for k, v in params.items()}
        out.append((name, json.dumps(params, ensure_ascii=False)))
    said = "".join(content)
    if out:
        return said.strip() or None, out
    return said or None, []
