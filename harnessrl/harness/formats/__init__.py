"""Tool-call formats: how a model writes its calls, one module per format.

Each model family was trained to write tool calls its own way, and its chat template renders them so:

    hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call>          Qwen2.5, SmolLM2 (ours)
    qwen3_coder  <tool_call><function=NAME><parameter=KEY>value</parameter>...      Qwen3-Coder
    llama3_json  {"name": ..., "parameters": {...}}; {...}                          Llama 3.1-3.3
    mistral      [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]              Mistral 7B v0.3

A format module has the same few names, so the harness, the SFT data and `serve` take the module
itself (FORMATS[name]) and never branch on the format:

    VLLM_PARSER     the name of vLLM's tool parser for this format (`vllm serve --tool-call-parser`)
    TEMPLATE_MARK   text a chat template renders calls with: how a model folder's template is checked
    HINT            the one line that tells a model, after a malformed turn, how to write a call
    MARKERS         text that means a call is being written (a summary must hold none)
    STARTS          text where a call may begin: `serve` streams content only up to it
    render_calls    calls -> the assistant text that makes them, as the model should write it
    split           a turn -> Split: call bodies, the text outside them, structural problems
    decode          one body -> its raw name and arguments, or the problems that say why not
    extract         a turn -> (content, calls) as vLLM's parser for the format returns them: what
                    `serve` sends back as `tool_calls`

`split` and `decode` are strict: the harness trains on what the model wrote, so anything that is not
exactly a call is a malformed turn, with a class (harnessrl/harness/protocol.py counts them).
`extract` is lenient the way vLLM is, so a client gets from `harnessrl serve` what it would get from
vLLM serving the same checkpoint; tests/test_tool_formats_vllm.py holds it to vLLM's parsers.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

# The classes of a malformed turn. A turn may have several problems; each has one class.
UNPARSEABLE = "unparseable"  # not a call in this format (bad JSON or XML, missing name, extra fields)
UNCLOSED = "unclosed"  # a call opened and never closed
UNKNOWN_TOOL = "unknown_tool"
BAD_ARGUMENTS = "bad_arguments"  # arguments of the wrong type or failing the tool's schema
TEXT_OUTSIDE = "text_outside"  # prose beside calls: a turn is calls only or an answer only
TOO_MANY_CALLS = "too_many_calls"
EMPTY = "empty"
MISPLACED = "misplaced"  # a tag the model may not write there: a tool response, a stray close, <think>
CLASSES = (UNPARSEABLE, UNCLOSED, UNKNOWN_TOOL, BAD_ARGUMENTS, TEXT_OUTSIDE, TOO_MANY_CALLS, EMPTY, MISPLACED)


@dataclass
class Problem:
    kind: str  # one of the classes above
    message: str  # what the model reads back, naming the call and what is wrong


@dataclass
class Split:
    """A turn cut into its calls, as the format writes them."""

    bodies: list[str] = field(default_factory=list)  # one per call, between its markers
    outside: str = ""  # all text outside the calls
    problems: list[Problem] = field(default_factory=list)  # structural: unclosed, stray tags
    marked: bool = False  # the turn has any call syntax at all (else it is a final answer)


@dataclass
class RawCall:
    """What a call body says, before any check against the tools."""

    name: Any = None  # None when the body names no tool
    arguments: Any = field(default_factory=dict)


def short(s: str, n: int = 80) -> str:
    """A one-line excerpt for an error message."""
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 3] + "..."


def split_tags(text: str, open_tag: str, close_tag: str, tags: re.Pattern[str], forbidden: tuple[str, ...]) -> Split:
    """Cut text at open/close tag pairs (Hermes and Qwen3-Coder share <tool_call>...</tool_call>).
    `tags` matches every tag the format knows; those in `forbidden` may never be written by a model."""
    out = Split(marked=bool(tags.search(text)))
    outside: list[str] = []
    pos, open_at = 0, None
    for tag in tags.finditer(text):
        t = tag.group()
        if t in forbidden:
            out.problems.append(
                Problem(MISPLACED, f"the turn contains {t}; tool responses come from the harness, never the model")
            )
        elif t == open_tag:
            if open_at is not None:
                msg = f"call {len(out.bodies) + 1}: {open_tag} opened again before {close_tag}"
                out.problems.append(Problem(UNCLOSED, msg))
            else:
                outside.append(text[pos : tag.start()])
            open_at = tag.end()
        elif t != close_tag:
            continue  # a tag that only means something inside a call body (e.g. <function=)
        elif open_at is None:
            msg = f"stray {close_tag} with no open {open_tag} (after {len(out.bodies)} complete calls)"
            out.problems.append(Problem(MISPLACED, msg))
            outside.append(text[pos : tag.start()])
            pos = tag.end()
        else:
            out.bodies.append(text[open_at : tag.start()])
            open_at, pos = None, tag.end()
    if open_at is not None:
        msg = f"call {len(out.bodies) + 1}: {open_tag} is never closed with {close_tag}"
        out.problems.append(Problem(UNCLOSED, msg))
    else:
        outside.append(text[pos:])
    out.outside = "".join(outside)
    return out


def json_call(i: int, body: str, args_key: str) -> tuple[RawCall | None, list[Problem]]:
    """A JSON call body {"name": ..., args_key: {...}}: its name and arguments, or the problem that
    says why it does not parse; extra keys are reported. A missing arguments key means no arguments."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        msg = f"call {i}: invalid JSON ({e.msg} at line {e.lineno} column {e.colno}): {short(body)!r}"
        return None, [Problem(UNPARSEABLE, msg)]
    except (ValueError, RecursionError) as e:  # e.g. integers too long to convert, absurd nesting
        return None, [Problem(UNPARSEABLE, f"call {i}: invalid JSON ({type(e).__name__})")]
    if not isinstance(obj, dict):
        got = type(obj).__name__
        return None, [
            Problem(UNPARSEABLE, f'call {i}: expected a JSON object {{"name": ..., "{args_key}": {{...}}}}, got {got}')
        ]
    problems = []
    extra = sorted(set(obj) - {"name", args_key})
    if extra:
        problems.append(
            Problem(UNPARSEABLE, f"call {i}: unexpected keys {extra}; a call has only 'name' and '{args_key}'")
        )
    return RawCall(name=obj.get("name"), arguments=obj.get(args_key, {})), problems


def schema_types(schema: Any) -> set[str]:
    """The JSON types a parameter's schema allows, as vLLM reads them to type an XML value: the union
    of `type` (a name or a list), the types of its `enum` values, and anyOf/oneOf/allOf; "string"
    when it says nothing."""
    if not isinstance(schema, dict):
        return {"string"}
    types: set[str] = set()
    t = schema.get("type")
    types |= {t} if isinstance(t, str) else {x for x in t if isinstance(x, str)} if isinstance(t, list) else set()
    enum = schema.get("enum")
    if isinstance(enum, list):
        for v in enum:
            types.add(next((n for k, n in _ENUM_TYPES if isinstance(v, k)), "string") if v is not None else "null")
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) if isinstance(schema.get(key), list) else []:
            types |= schema_types(sub)
    return types or {"string"}


# bool before int: True is an int to isinstance.
_ENUM_TYPES = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)
_ALIASES = {"str": "string", "text": "string", "varchar": "string", "char": "string", "enum": "string",
            "int": "integer", "int32": "integer", "int64": "integer", "uint": "integer", "uint32": "integer",
            "uint64": "integer", "long": "integer", "short": "integer", "unsigned": "integer",
            "float": "number", "float32": "number", "float64": "number", "double": "number",
            "bool": "boolean", "dict": "object", "arr": "array", "list": "array", "sequence": "array"}  # fmt: skip


def _json(value: str) -> tuple[bool, Any]:
    """(True, the value) if `value` is JSON that serializes back (no inf or nan inside), else (False, None)."""
    try:
        v = json.loads(value)
        json.dumps(v, allow_nan=False)
        return True, v
    except (ValueError, TypeError, RecursionError):
        return False, None


def typed(value: str, schema: Any) -> Any:
    """An XML parameter's text as the value its schema asks for, tried in vLLM's order: null, integer,
    number, boolean, object or array (any JSON), string. A value no allowed type takes is JSON if it
    parses, else the text as written."""
    types = {_ALIASES.get(t.strip().lower(), t.strip().lower()) for t in schema_types(schema)}
    if "null" in types and value.lower() == "null":
        return None
    if "integer" in types:
        try:
            return int(value)
        except ValueError:
            pass
    if "number" in types:
        try:
            v = float(value)
            if math.isfinite(v):
                return int(v) if v == int(v) else v
        except ValueError:
            pass
    if "boolean" in types and value.lower().strip() in ("true", "1", "false", "0"):
        return value.lower().strip() in ("true", "1")
    if types & {"object", "array"}:
        ok, v = _json(value)
        if ok:
            return v
    if "string" in types:
        return value
    ok, v = _json(value)
    return v if ok else value


def properties(tools: list[dict[str, Any]] | None, name: str) -> dict[str, Any] | None:
    """The `properties` of a tool's parameters in OpenAI's function format, or None if not offered."""
    for t in tools or []:
        fn = t.get("function") or {}
        if fn.get("name") == name:
            return (fn.get("parameters") or {}).get("properties") or {}
    return None


def convert(messages: list[dict[str, Any]], fmt: ModuleType) -> list[dict[str, Any]]:
    """A conversation whose assistant calls are written in Hermes (how the data folder stores every
    expert conversation) with its calls written in `fmt` instead: what SFT trains a model on in its
    own format. Anything else is kept as it is."""
    if fmt is hermes:
        return messages
    out = []
    for m in messages:
        parts = (
            hermes.split(m["content"]) if m.get("role") == "assistant" and isinstance(m.get("content"), str) else None
        )
        if parts and parts.bodies and not parts.problems and not parts.outside.strip():
            calls = [hermes.decode(i, body, {})[0] for i, body in enumerate(parts.bodies, 1)]
            if all(c is not None and isinstance(c.name, str) and isinstance(c.arguments, dict) for c in calls):
                m = m | {"content": fmt.render_calls([(c.name, c.arguments) for c in calls])}
        out.append(m)
    return out


def template_format(template: str | None) -> str | None:
    """The format a chat template renders tool calls in, by the markup it writes; None when it
    renders none. Qwen3-Coder's template also writes <tool_call>, so it is recognised first."""
    if not template:
        return None
    for name in ("qwen3_coder", "mistral", "hermes", "llama3_json"):
        if FORMATS[name].TEMPLATE_MARK in template:
            return name
    return None


def check_template(template: str | None, tool_format: str, where: str) -> None:
    """Refuse a model whose chat template renders calls in another format than `tool_format`: trained
    in a format not its own, it would waste what pretraining taught it, and a server would parse what
    the template renders with the wrong parser. A template that renders no calls says nothing."""
    rendered = template_format(template)
    if rendered is not None and rendered != tool_format:
        raise ValueError(
            f"model.tool_format is {tool_format!r}, but the chat template of {where} renders tool calls "
            f"as {rendered!r}: set model.tool_format={rendered}"
        )


def name_of(fmt: ModuleType) -> str:
    """A format module's name, as FORMATS and harness.json spell it."""
    return fmt.__name__.rsplit(".", 1)[-1]


def load(name: str) -> ModuleType:
    """The format module called `name`; an unknown name is a ValueError listing the known ones."""
    if name not in FORMATS:
        raise ValueError(f"unknown tool-call format {name!r}; known: {', '.join(FORMATS)}")
    return FORMATS[name]


from harnessrl.harness.formats import hermes, llama3_json, mistral, qwen3_coder  # noqa: E402

FORMATS: dict[str, ModuleType] = {
    "hermes": hermes,
    "qwen3_coder": qwen3_coder,
    "llama3_json": llama3_json,
    "mistral": mistral,
}
