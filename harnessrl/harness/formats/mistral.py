"""Mistral (v0.3 tokenizers): a marker, then every call of the turn in one JSON list.

    [TOOL_CALLS] [{"name": "read_file", "arguments": {"path": "src/app.py"}}]

vLLM's parser: `mistral`, on a tokenizer whose vocabulary has [TOOL_CALLS] but not [ARGS] (the
pre-v11 format; v11 tokenizers write `[TOOL_CALLS]name[ARGS]{...}`, which this module does not read).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from harnessrl.harness.formats import UNCLOSED, UNPARSEABLE, Problem, RawCall, Split, json_call, short
from harnessrl.harness.tools import Tool

VLLM_PARSER = "mistral"
MARK = "[TOOL_CALLS]"
TEMPLATE_MARK = MARK
HINT = f'Write the calls as {MARK} [{{"name": ..., "arguments": {{...}}}}, ...], or answer in plain text.'
MARKERS = (MARK,)
STARTS = (MARK,)  # where a call may begin: what `serve` holds back when streaming
_DECODER = json.JSONDecoder()


def render_calls(calls: list[tuple[str, dict[str, Any]]]) -> str:
    return f"{MARK} " + json.dumps([{"name": n, "arguments": a} for n, a in calls], ensure_ascii=False)


def split(text: str) -> Split:
    if MARK not in text:
        return Split()
    before, _, after = text.partition(MARK)
    out = Split(marked=True, outside=before)
    if MARK in after:
        out.problems.append(Problem(UNPARSEABLE, f"{MARK} appears more than once; one list holds every call"))
        return out
    body = after.lstrip()
    try:
        calls, n = _DECODER.raw_decode(body)
    except json.JSONDecodeError as e:
        kind = UNCLOSED if e.pos >= len(body.rstrip()) and body.strip() else UNPARSEABLE
        what = "is never closed" if kind == UNCLOSED else f"is not JSON ({e.msg} at column {e.colno})"
        out.problems.append(Problem(kind, f"the list after {MARK} {what}: {short(body)!r}"))
        return out
    except (ValueError, RecursionError) as e:
        out.problems.append(Problem(UNPARSEABLE, f"the list after {MARK} is not JSON ({type(e).__name__})"))
        return out
    if not isinstance(calls, list):
        got = type(calls).__name__
        out.problems.append(Problem(UNPARSEABLE, f"expected a JSON list of calls after {MARK}, got {got}"))
        return out
    if not calls:
        out.problems.append(Problem(UNPARSEABLE, f"an empty list after {MARK}"))
    out.bodies = [json.dumps(c, ensure_ascii=False) for c in calls]
    out.outside += body[n:]
    return out


def decode(i: int, body: str, tools: Mapping[str, Tool]) -> tuple[RawCall | None, list[Problem]]:
    return json_call(i, body, "arguments")


_LIST = re.compile(r"\[{.*}\]", re.DOTALL)


def extract(text: str, tools: list[dict[str, Any]] | None = None) -> tuple[str | None, list[tuple[str, str]]]:
    """As vLLM's Mistral parser on a pre-v11 tokenizer: the first JSON value after the marker (or
    the first [{...}] in it) gives the calls, skipping entries that are not call objects; with none,
    the content is the text after the marker."""
    if MARK not in text:
        return text, []
    content, *segments = text.split(MARK)
    body = next((s.strip() for s in segments if s.strip()), "")
    try:
        parsed, _ = _DECODER.raw_decode(body)
    except json.JSONDecodeError:
        try:
            parsed = json.loads(_LIST.findall(body)[0])
        except (IndexError, ValueError, RecursionError):
            parsed = None
    except (ValueError, RecursionError):
        parsed = None
    parsed = [parsed] if isinstance(parsed, dict) else parsed if isinstance(parsed, list) else []
    calls = []
    for c in parsed:
        if not isinstance(c, dict) or not ("name" in c or "arguments" in c):
            continue
        name, arguments = c.get("name"), c.get("arguments")
        arguments = (
            "{}"
            if arguments is None
            else arguments
            if isinstance(arguments, str)
            else json.dumps(arguments, ensure_ascii=False)
        )
        calls.append((name if isinstance(name, str) else "", arguments))
    if not calls:
        return body, []
    return (content if content.strip() else None), calls
