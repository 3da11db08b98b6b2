"""`harnessrl serve`'s ASGI app: OpenAI chat completions (tools, tool_calls, streaming), feedback,
and a session log of every turn, on FastAPI under uvicorn.

One request's path: the body is read (at most MAX_BODY_BYTES) and validated (openai_api.py); the
conversation is rendered into prompt ids as training renders it; the generation thread samples the
completion (engine.py), streaming its tokens if asked; the turn is appended to sessions.jsonl and
fsynced; only then does the client see the end of the response. A session id (the X-Session-Id
header, or a fresh one) ties a conversation's turns together, and every response names the
checkpoint that produced it (`system_fingerprint` and the X-Policy-Version header).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from harnessrl.engines.hf import Completion
from harnessrl.harness.formats import hermes, name_of
from harnessrl.live.feedback import SESSION_ID, FeedbackStore, parse_event
from harnessrl.serve.engine import Checkpoint, Generator, Job
from harnessrl.serve.openai_api import MAX_BODY_BYTES, APIError, ChatRequest, split_tool_calls, validation_error
from harnessrl.serve.session_log import AppendLog


class Served:
    """What the app serves from: the generation thread, the logs, and the served model's name."""

    def __init__(self, generator: Generator, sessions: AppendLog | None, feedback: FeedbackStore, name: str,
                 default_max_tokens: int, api_key: str | None = None) -> None:  # fmt: skip
        self.generator, self.sessions, self.feedback, self.name = generator, sessions, feedback, name
        self.default_max_tokens, self.api_key = default_max_tokens, api_key
        self.session_ids: set[str] = set()  # logged by this server: feedback for others is counted


async def read_json(request: Request) -> Any:
    """The body as JSON; a 413 past the size limit and a 400 that says where the JSON breaks."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise APIError(413, f"request body over {MAX_BODY_BYTES} bytes", code="request_too_large")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise APIError(413, f"request body over {MAX_BODY_BYTES} bytes", code="request_too_large")
    try:
        return json.loads(body)
    except RecursionError:
        raise APIError(400, "the body nests too deeply", code="invalid_json") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        where = f" at line {e.lineno} column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
        raise APIError(400, f"the body is not valid JSON{where}", code="invalid_json") from None


def authorize(served: Served, request: Request) -> None:
    """With an API key set, every /v1 request must carry it (`Authorization: Bearer KEY`, as the
    openai client sends it); compared in constant time."""
    if served.api_key is None:
        return
    given = request.headers.get("authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {served.api_key}".encode()):
        raise APIError(401, "missing or wrong API key (Authorization: Bearer KEY)", code="invalid_api_key")


def session_id(request: Request) -> str:
    given = request.headers.get("x-session-id")
    if given is None:
        return f"s-{uuid.uuid4().hex}"
    if not re.match(SESSION_ID, given):
        raise APIError(400, "X-Session-Id: 1-128 characters of A-Z a-z 0-9 _ . : -", param="X-Session-Id")
    return given


def create_app(served: Served) -> FastAPI:
    app = FastAPI(title="harnessrl serve", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(APIError)
    async def _api_error(_: Request, e: APIError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, e: HTTPException) -> JSONResponse:  # unknown paths, wrong methods
        return JSONResponse(APIError(e.status_code, str(e.detail)).body(), status_code=e.status_code)

    @app.exception_handler(Exception)
    async def _server_error(_: Request, e: Exception) -> JSONResponse:
        print(f"[serve] error: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return JSONResponse(APIError(500, f"internal error ({type(e).__name__})").body(), status_code=500)

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "policy_version": served.generator.current.version}

    @app.get("/v1/models")
    async def models(request: Request) -> dict:
        authorize(served, request)
        ckpt = served.generator.current
        return {"object": "list", "data": [{"id": served.name, "object": "model", "created": 0,
                "owned_by": "harnessrl", "root": str(ckpt.path), "max_model_len": ckpt.renderer.context}]}  # fmt: skip

    @app.post("/v1/feedback")
    async def feedback(request: Request) -> dict:
        authorize(served, request)
        body = await read_json(request)
        items = body.get("events") if isinstance(body, dict) and "events" in body else [body]
        if not isinstance(items, list) or not items:
            raise APIError(400, "events: a non-empty list of feedback events", param="events")
        where = "events" if isinstance(body, dict) and "events" in body else "event"
        try:
            events = [parse_event(e, f"{where}[{i}]" if where == "events" else where) for i, e in enumerate(items)]
        except ValueError as e:
            raise APIError(400, str(e), code="invalid_value") from None
        counts = await asyncio.to_thread(served.feedback.add, events)
        counts["unknown_session"] = sum(e["session_id"] not in served.session_ids for e in events)
        return counts

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        authorize(served, request)
        raw = await read_json(request)
        try:
            req = ChatRequest.model_validate(raw)
        except ValidationError as e:
            raise validation_error(e) from None
        except RecursionError:
            raise APIError(400, "the body nests too deeply", code="invalid_value") from None
        if req.model != served.name:
            raise APIError(404, f"model {req.model!r} is not served here (this server serves {served.name!r})",
                           param="model", code="model_not_found")  # fmt: skip
        sid = session_id(request)
        messages, tools = req.chat()
        renderer = served.generator.renderer
        try:
            prompt = await asyncio.to_thread(renderer.prompt_ids, messages, tools)
        except Exception as e:  # a chat template that cannot render these messages (jinja raises its own types)
            raise APIError(400, f"messages: the chat template cannot render them ({e})", param="messages") from None
        room = renderer.room(prompt, req.cap(served.default_max_tokens))
        if room <= 0:
            raise APIError(400, f"This model's maximum context length is {renderer.context} tokens; the messages "
                           f"take {len(prompt)}", param="messages", code="context_length_exceeded")  # fmt: skip
        if not isinstance(served.generator, Generator):  # --engine vllm: vLLM's own server generates
            from harnessrl.serve.vllm_upstream import proxy_chat

            return await proxy_chat(served, req, raw, sid, prompt, room)
        turn = Turn(served, req, sid, prompt, room, asyncio.get_running_loop())
        if not served.generator.submit(turn.job()):
            raise APIError(503, "the server is overloaded: too many requests waiting; retry later", code="overloaded")
        headers = {"X-Session-Id": sid}
        if req.stream:
            return StreamingResponse(turn.chunks(), media_type="text/event-stream", headers=headers)
        done = await turn.finished()
        headers["X-Policy-Version"] = done.version
        return JSONResponse(turn.response(done), headers=headers)

    return app


class Turn:
    """One chat completion from request to log: collects the streamed tokens, writes the log record,
    and renders the OpenAI response or its stream of chunks."""

    def __init__(self, served: Served, req: ChatRequest, sid: str, prompt: list[int], room: int,
                 loop: asyncio.AbstractEventLoop) -> None:  # fmt: skip
        self.served, self.req, self.sid, self.prompt, self.room, self.loop = served, req, sid, prompt, room, loop
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.started = time.perf_counter()
        self.events: asyncio.Queue = asyncio.Queue()

    def job(self) -> Job:
        def on_token(token: int, logprob: float) -> None:
            self.loop.call_soon_threadsafe(self.events.put_nowait, ("token", token, logprob))

        def finish(done: Done | None, error: BaseException | None) -> None:
            self.loop.call_soon_threadsafe(self.events.put_nowait, ("done", None if error else done, error))

        def on_done(result: Completion | BaseException, ckpt: Checkpoint, ttft: float | None) -> None:
            # On the generation thread. The client sees the end only once the record is on disk (the
            # log's writer thread calls `finish` then), so a crash loses nothing a client saw.
            if not isinstance(result, Completion):
                return finish(None, result)
            try:
                done = Done(self, result, ckpt, ttft)
                record = done.record()
            except Exception as e:
                return finish(None, e)
            self.served.session_ids.add(self.sid)
            if self.served.sessions is None:  # served with --no-log
                return finish(done, None)
            self.served.sessions.append_then(record, lambda error: finish(done, error))

        return Job(self.prompt, self.room, self.req.temperature, self.req.seed, on_token, on_done)

    async def finished(self) -> Done:
        while True:
            event = await self.events.get()
            if event[0] == "done":
                if event[1] is None:
                    raise event[2]
                return event[1]

    def response(self, done: Done) -> dict[str, Any]:
        content, calls = done.content, done.calls
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": done.finish_reason,
                                  "logprobs": self.logprobs(done.completion) if self.req.logprobs else None}  # fmt: skip
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.served.name,
                "system_fingerprint": done.version, "choices": [choice], "usage": done.usage}  # fmt: skip

    def logprobs(self, c: Completion) -> dict[str, Any]:
        tok = self.served.generator.renderer.tok
        names = (
            [f"token_id:{t}" for t in c.token_ids]
            if self.req.return_tokens_as_token_ids
            else [tok.decode([t]) for t in c.token_ids]
        )
        return {"content": [{"token": n, "logprob": lp, "bytes": None, "top_logprobs": []}
                            for n, lp in zip(names, c.logprobs, strict=True)]}  # fmt: skip

    def chunk(self, delta: dict[str, Any], finish: str | None = None, version: str | None = None) -> str:
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.served.name,
                "system_fingerprint": version, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
        return f"data: {json.dumps(body)}\n\n"

    async def chunks(self) -> AsyncIterator[str]:
        """Server-sent events: text as it is sampled, held back from the first <tool_call> on (a call
        is sent whole at the end, as a parser can only judge it then), then the finish chunk."""
        tok = self.served.generator.renderer.tok
        stop = self.served.generator.renderer.stop
        yield self.chunk({"role": "assistant", "content": ""})
        ids: list[int] = []
        sent = ""
        while True:
            event = await self.events.get()
            if event[0] == "token":
                if event[1] in stop:
                    continue
                ids.append(event[1])
                text = tok.decode(ids)
                safe = safe_prefix(text, self.served.generator.current.fmt)
                if len(safe) > len(sent):
                    yield self.chunk({"content": safe[len(sent) :]})
                    sent = safe
                continue
            done, error = event[1], event[2]
            if done is None:
                body = APIError(500, f"generation failed ({type(error).__name__})").body()
                yield f"data: {json.dumps(body)}\n\n"
                return
            content = done.content or ""
            if done.calls:
                # The parser's content is what preceded the first call; what was streamed is a prefix
                # of it, except where the format strips it (qwen3_coder) or has none (llama3_json).
                if content.startswith(sent) and len(content) > len(sent):
                    yield self.chunk({"content": content[len(sent) :]})
                for i, call in enumerate(done.calls):
                    yield self.chunk({"tool_calls": [{"index": i} | call]})
            elif len(content) > len(sent):
                yield self.chunk({"content": content[len(sent) :]})
            yield self.chunk({}, done.finish_reason, done.version)
            if self.req.stream_options and self.req.stream_options.include_usage:
                body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                        "model": self.served.name, "choices": [], "usage": done.usage}  # fmt: skip
                yield f"data: {json.dumps(body)}\n\n"
            yield "data: [DONE]\n\n"
            return


def safe_prefix(text: str, fmt: ModuleType = hermes) -> str:
    """What may be streamed of the text so far: not a half-decoded character, and nothing from where
    a call may begin in the checkpoint's format on (nor a trailing piece that could be the start of
    one). The parser judges a call only once the completion is done."""
    starts = [text.index(s) for s in fmt.STARTS if s in text]
    if starts:
        text = text[: min(starts)]
    for start in fmt.STARTS:
        for k in range(min(len(start) - 1, len(text)), 0, -1):
            if start.startswith(text[-k:]):
                text = text[:-k]
                break
    return text.rstrip("\ufffd")


class Done:
    """A finished completion: its text split as the client sees it, and its session-log record."""

    def __init__(self, turn: Turn, c: Completion, ckpt: Checkpoint, ttft: float | None) -> None:
        self.turn, self.completion, self.version = turn, c, ckpt.version
        self.checkpoint, self.tool_format = str(ckpt.path), name_of(ckpt.fmt)
        self.total_s = time.perf_counter() - turn.started
        self.ttft_s = ttft
        t = ckpt.renderer.turn(turn.prompt, c.token_ids, c.logprobs, turn.room)
        self.text, self.finish = t.text, t.finish
        offered = [t.model_dump() for t in turn.req.tools or []]
        self.content, self.calls = split_tool_calls(self.text, ckpt.fmt, offered)
        self.usage = {"prompt_tokens": len(turn.prompt), "completion_tokens": len(c.token_ids),
                      "total_tokens": len(turn.prompt) + len(c.token_ids)}  # fmt: skip

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.calls else ("length" if self.finish == "length" else "stop")

    def record(self) -> dict[str, Any]:
        req = self.turn.req
        return {
            "session_id": self.turn.sid,
            "request_id": self.turn.id,
            "time": time.time(),
            "policy_version": self.version,
            "checkpoint": self.checkpoint,
            "tool_format": self.tool_format,
            "temperature": req.temperature,
            "user": req.user,
            "tools": [t.function.name for t in req.tools or []] if req.tool_choice != "none" else [],
            "prompt_ids": self.turn.prompt,
            "completion_ids": self.completion.token_ids,
            "logprobs": self.completion.logprobs,
            "text": self.text,
            "tool_calls": [
                {"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in self.calls
            ],
            "finish_reason": self.finish_reason,
            "ttft_s": self.ttft_s,
            "total_s": self.total_s,
        }
