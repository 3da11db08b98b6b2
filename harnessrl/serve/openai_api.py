"""The OpenAI chat-completions wire format `harnessrl serve` speaks: requests validated field by field,
completions turned into `tool_calls` the way vLLM's Hermes parser does, and the OpenAI error shape.

A request is hostile until validated: every model is `extra="forbid"`, so an unknown or misspelt field
is a 400 that names it, never silently ignored. Settings the server cannot honour (n > 1, top_p,
penalties, stop strings) are refused by name for the same reason.
"""

from __future__ import annotations

import json
import uuid
from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harnessrl.harness.formats import hermes

MAX_BODY_BYTES = 4 << 20  # a request larger than this is refused before it is parsed (413)


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FunctionSpec(Wire):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        # A tool's arguments are a JSON object, so its schema must describe one.
        if v is not None and v.get("type", "object") != "object":
            raise ValueError(f"a function's parameters must be a JSON Schema of type 'object', got {v.get('type')!r}")
        if v is not None and not isinstance(v.get("properties", {}), dict):
            raise ValueError("a function's parameters.properties must be an object")
        return v


class ToolSpec(Wire):
    type: Literal["function"]
    function: FunctionSpec


class FunctionCall(Wire):
    name: str
    arguments: str


class ToolCallOut(Wire):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class TextPart(Wire):
    type: Literal["text"]
    text: str


class Message(Wire):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallOut] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _fits_role(self) -> Message:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages carry tool_calls, not {self.role}")
        if self.role == "tool" and self.content is None:
            raise ValueError("a tool message needs content: the tool's result")
        if self.role in ("system", "user") and self.content is None:
            raise ValueError(f"a {self.role} message needs content")
        return self

    def as_chat(self) -> dict[str, Any]:
        """The plain dict a chat template (or the tiny ChatML renderer) reads."""
        content = self.content if not isinstance(self.content, list) else "".join(p.text for p in self.content)
        out: dict[str, Any] = {"role": self.role, "content": content or ""}
        # A real model's chat template may render these; the tiny ChatML ignores them.
        out |= {k: v for k, v in (("name", self.name), ("tool_call_id", self.tool_call_id)) if v is not None}
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": _json_or_raw(c.function.arguments)},
                }
                for c in self.tool_calls
            ]
        return out


class StreamOptions(Wire):
    include_usage: bool = False


class ChatRequest(Wire):
    model: str
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["auto", "none"] | None = None
    parallel_tool_calls: bool | None = None  # only true: the model may always make several calls in a turn
    max_tokens: int | None = Field(None, gt=0)
    max_completion_tokens: int | None = Field(None, gt=0)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, description="only 1: the engine samples the whole distribution")
    n: int = Field(1, description="only 1")
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, description="only 0 or None")
    return_tokens_as_token_ids: bool = False  # vLLM's extension, which `harnessrl agent --endpoint` uses
    user: str | None = Field(None, max_length=256, description="the end user, recorded in the session log")

    @model_validator(mode="after")
    def _honoured(self) -> ChatRequest:
        refused = [
            f"{name}={getattr(self, name)}"
            for name, ok in (
                ("top_p", self.top_p == 1.0),
                ("n", self.n == 1),
                ("top_logprobs", not self.top_logprobs),
                ("parallel_tool_calls", self.parallel_tool_calls is not False),
            )
            if not ok
        ]
        if refused:
            raise ValueError(f"{', '.join(refused)}: not supported by this server (top_p 1, n 1, no top_logprobs, "
                             "and a turn may always hold several calls)")  # fmt: skip
        if self.max_tokens and self.max_completion_tokens and self.max_tokens != self.max_completion_tokens:
            raise ValueError("max_tokens and max_completion_tokens differ; give one")
        return self

    def cap(self, default: int) -> int:
        return self.max_completion_tokens or self.max_tokens or default

    def chat(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Messages and tools as the renderer takes them; tool_choice none hides the tools."""
        tools = [t.model_dump(exclude_none=True) for t in self.tools or []] if self.tool_choice != "none" else []
        return [m.as_chat() for m in self.messages], tools


def _json_or_raw(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


# ----------------------------------------------------------------------------- completions -> tool_calls


def split_tool_calls(
    text: str, fmt: ModuleType = hermes, tools: list[dict[str, Any]] | None = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """A completion as (content, tool_calls), as vLLM's parser for the checkpoint's tool-call format
    splits it (harnessrl/harness/formats/; tests/test_tool_formats_vllm.py holds the two to agreement).
    A call the parser cannot read leaves the turn as plain content, so the client sees what the model
    wrote and the harness reports the error back, instead of a call silently dropped. `tools` (the
    request's, in OpenAI's format) type qwen3_coder's parameters by their schemas."""
    content, calls = fmt.extract(text, tools)
    return content, [
        {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": name, "arguments": arguments}}
        for name, arguments in calls
    ]


# ----------------------------------------------------------------------------- errors


class APIError(Exception):
    """An error the client caused or must see, as OpenAI shapes it."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


def validation_error(e: ValidationError, prefix: tuple = ()) -> APIError:
    """The first problem of a pydantic error, with the field's dotted path as OpenAI's `param`."""
    first = e.errors()[0]
    loc = [str(x) for x in (*prefix, *first["loc"]) if x not in ("body",)]
    where = ".".join(loc) or "body"
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown field"
    return APIError(400, f"{where}: {msg}", param=where, code="invalid_value")
