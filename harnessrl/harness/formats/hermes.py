"""Hermes (Qwen2.5's convention, and harnessrl's own): a JSON object per call between tags.

    <tool_call>
    {"name": "read_file", "arguments": {"path": "src/app.py"}}
    </tool_call>

Several calls are several tag pairs. vLLM's parser: `hermes`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from harnessrl.harness.formats import Problem, RawCall, Split, json_call, split_tags
from harnessrl.harness.tools import Tool

VLLM_PARSER = "hermes"
OPEN, CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
TEMPLATE_MARK = OPEN
HINT = f'Write each call as {OPEN}{{"name": ..., "arguments": {{...}}}}{CLOSE}, or answer in plain text with no tags.'
MARKERS = (OPEN, CLOSE)  # text that means a call is being written
STARTS = (OPEN,)  # where a call may begin: what `serve` holds back when streaming
_TAGS = re.compile(r"</?tool_call>|</?tool_response>")


def _call_json(name: str, arguments: dict[str, Any]) -> str:
    s = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    # An argument containing a literal tag (e.g. editing this very file) would end the call early;
    # "<" only occurs inside JSON strings here, so escaping it as \u003c keeps the JSON identical.
    if _TAGS.search(s) or "think>" in s:
        s = s.replace("<", "\\u003c")
    return s


def render_calls(calls: list[tuple[str, dict[str, Any]]]) -> str:
    return "\n".join(f"{OPEN}\n{_call_json(n, a)}\n{CLOSE}" for n, a in calls)


def split(text: str) -> Split:
    return split_tags(text, OPEN, CLOSE, _TAGS, forbidden=(RESPONSE_OPEN, RESPONSE_CLOSE))


def decode(i: int, body: str, tools: Mapping[str, Tool]) -> tuple[RawCall | None, list[Problem]]:
    return json_call(i, body, "arguments")


_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


def extract(text: str, tools: list[dict[str, Any]] | None = None) -> tuple[str | None, list[tuple[str, str]]]:
    """As vLLM's Hermes parser: every call (the last may be unclosed) must be a JSON object with a
    string name and an arguments key, or the whole text is content; content is what precedes the first
    call, unstripped."""
    if OPEN not in text:
        return text, []
    calls = []
    for closed, unclosed in _CALL.findall(text):
        try:
            obj = json.loads(closed or unclosed)
            name, arguments = obj["name"], obj["arguments"]
        except (ValueError, RecursionError, KeyError, TypeError, IndexError):
            return text, []
        if not isinstance(name, str):
            return text, []
        calls.append((name, json.dumps(arguments, ensure_ascii=False)))
    content = text[: text.find(OPEN)]
    return content or None, calls
