"""Llama 3 JSON: each call a bare JSON object with "parameters", calls separated by "; ".

    {"name": "read_file", "parameters": {"path": "src/app.py"}}

The turn may open with <|python_tag|>. A turn whose text opens with "{" is calls; prose that holds a
call object is prose beside a call, which the harness refuses. vLLM's parser: `llama3_json`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from harnessrl.harness.formats import UNCLOSED, UNPARSEABLE, Problem, RawCall, Split, json_call, short
from harnessrl.harness.tools import Tool

VLLM_PARSER = "llama3_json"
PYTHON_TAG = "<|python_tag|>"
TEMPLATE_MARK = '"parameters": '
HINT = 'Write each call as {"name": ..., "parameters": {...}}, calls separated by "; ", or answer in plain text.'
MARKERS = (PYTHON_TAG,)
STARTS = (PYTHON_TAG, "{")  # where a call may begin: what `serve` holds back when streaming
_DECODER = json.JSONDecoder()


def render_calls(calls: list[tuple[str, dict[str, Any]]]) -> str:
    return "; ".join(json.dumps({"name": n, "parameters": a}, ensure_ascii=False) for n, a in calls)


def _objects(text: str) -> tuple[list[tuple[int, int]], int | None]:
    """The spans of the top-level JSON objects in text, scanning each "{" as vLLM does, up to the
    first "{" that fails to decode, and where that is (None if none did)."""
    spans: list[tuple[int, int]] = []
    end, failed = -1, None
    for i, c in enumerate(text):
        if c != "{" or i <= end:
            continue
        try:
            _, n = _DECODER.raw_decode(text[i:])
        except (ValueError, RecursionError):
            failed = i
            break
        spans.append((i, i + n))
        end = i + n - 1
    return spans, failed


def split(text: str) -> Split:
    body = text.lstrip()
    tagged = body.startswith(PYTHON_TAG)
    body = body.removeprefix(PYTHON_TAG)
    spans, failed = _objects(body)
    named = [s for s in spans if isinstance(_name_of(body[s[0] : s[1]]), str)]
    out = Split(marked=tagged or body.lstrip().startswith("{") or bool(named))
    if not out.marked:
        return out
    if not body.strip():
        out.problems.append(Problem(UNPARSEABLE, f"{PYTHON_TAG} with no call after it"))
        return out
    pos, outside = 0, []
    for a, b in spans:
        gap = body[pos:a]
        outside.append(gap if not out.bodies else gap.replace(";", "", 1))
        out.bodies.append(body[a:b])
        pos = b
    if failed is not None:
        rest = body[failed:]
        try:
            _DECODER.raw_decode(rest)
        except json.JSONDecodeError as e:
            kind = UNCLOSED if e.pos >= len(rest.rstrip()) else UNPARSEABLE
            what = "is never closed" if kind == UNCLOSED else f"is not JSON ({e.msg} at column {e.colno})"
            out.problems.append(Problem(kind, f"call {len(out.bodies) + 1}: {short(rest)!r} {what}"))
        except (ValueError, RecursionError) as e:
            out.problems.append(Problem(UNPARSEABLE, f"call {len(out.bodies) + 1}: invalid JSON ({type(e).__name__})"))
        outside.append(body[pos:failed])
    else:
        outside.append(body[pos:])
    out.outside = "".join(outside)
    return out


def _name_of(obj_text: str) -> Any:
    try:
        obj = json.loads(obj_text)
    except (ValueError, RecursionError):
        return None
    return obj.get("name") if isinstance(obj, dict) else None


def decode(i: int, body: str, tools: Mapping[str, Tool]) -> tuple[RawCall | None, list[Problem]]:
    return json_call(i, body, "parameters")


def extract(text: str, tools: list[dict[str, Any]] | None = None) -> tuple[str | None, list[tuple[str, str]]]:
    """As vLLM's Llama 3 JSON parser: every top-level "{" must open a JSON object with a string name
    and "arguments" or "parameters", or the whole text is content; on success there is no content."""
    if PYTHON_TAG not in text and "{" not in text:
        return text, []
    calls, end = [], -1
    for i, c in enumerate(text):
        if c != "{" or i <= end:
            continue
        try:
            obj, n = _DECODER.raw_decode(text[i:])
            end = i + n
            name = obj["name"]
            arguments = obj["arguments"] if "arguments" in obj else obj["parameters"]
        except (ValueError, RecursionError, KeyError, TypeError):
            return text, []
        if not isinstance(name, str):
            return text, []
        calls.append((name, json.dumps(arguments, ensure_ascii=False)))
    return (None, calls) if calls else (text, [])
