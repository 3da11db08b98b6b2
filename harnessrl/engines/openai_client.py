"""Any OpenAI-compatible chat-completions server (vLLM, SGLang, a hosted API) as a harness Policy.

The same episode loop, tools and checkers then benchmark a served model exactly as they benchmark
a local checkpoint. Stdlib urllib only: one POST per turn, JSON in and out.

What comes back is turned into the harness's text protocol: plain content stays as it is (a model
served without a tool parser writes <tool_call> tags itself); structured `tool_calls` (a server with a
tool parser) are written back as <tool_call> tags, so `parse_turn` classifies every turn the same way
whichever way the server was started. Token ids and logprobs come from vLLM's
`return_tokens_as_token_ids` extension ("token_id:123" strings); a server without it gives none, and
the harness then estimates tokens from the text.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from types import ModuleType
from typing import Any

from harnessrl.harness.episode import AssistantTurn
from harnessrl.harness.formats import hermes
from harnessrl.harness.protocol import CALL_CLOSE, CALL_OPEN


class EndpointError(RuntimeError):
    """The server failed or answered something that is not a chat completion; names the URL."""


def completions_url(base_url: str) -> str:
    """`http://host:8000/v1` (or the full .../chat/completions URL) -> the chat-completions URL."""
    base = base_url.rstrip("/")
    return base if base.endswith("/chat/completions") else base + "/chat/completions"


def _request(url: str, body: dict | None, timeout_s: float, api_key: str | None, retries: int = 3,
             session_id: str | None = None) -> dict:  # fmt: skip
    """POST (or GET without a body) JSON; retries connection failures and 5xx, which are the server's
    hiccups, never 4xx, which are ours. An HTTPError that is not retried propagates to the caller."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
    if session_id:  # `harnessrl serve` logs the turns of one conversation under it; other servers ignore it
        headers["X-Session-Id"] = session_id
    for attempt in range(retries + 1):
        try:
            req = urllib.request.Request(url, data=data, headers=headers, method="GET" if data is None else "POST")
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            if e.code < 500 or attempt == retries:
                raise
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            if attempt == retries:
                raise EndpointError(f"{url}: cannot reach the server ({getattr(e, 'reason', e)})") from None
        time.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


def served_model(base_url: str, timeout_s: float = 30.0, api_key: str | None = None) -> str:
    """The first model the server lists at /models: what a single-model vLLM server serves."""
    url = completions_url(base_url).removesuffix("/chat/completions") + "/models"
    try:
        models = _request(url, None, timeout_s, api_key)["data"]
        return models[0]["id"]
    except urllib.error.HTTPError as e:
        raise EndpointError(f"{url}: HTTP {e.code}; pass the model name explicitly") from None
    except (KeyError, IndexError, TypeError, ValueError):
        raise EndpointError(f"{url}: no model listed; pass the model name explicitly") from None


def _calls_as_text(tool_calls: list[dict[str, Any]], fmt: ModuleType = hermes) -> str:
    """A server's structured tool_calls as the text the model wrote them in: its format's. Arguments
    that are not a JSON object stay as they came (written in Hermes where the format cannot hold
    them), so the harness reports them back as malformed instead of dropping the call."""
    if fmt is not hermes:
        calls = []
        for c in tool_calls:
            fn = c.get("function") or {}
            raw = fn.get("arguments") or "{}"
            try:
                args = json.loads(raw) if isinstance(raw, str) else raw
            except json.JSONDecodeError:
                args = raw
            calls.append((fn.get("name", ""), args))
        try:
            return fmt.render_calls(calls)
        except (AttributeError, TypeError, ValueError):  # e.g. qwen3_coder's parameters need an object
            pass
    parts = []
    for c in tool_calls:
        fn = c.get("function") or {}
        raw = fn.get("arguments") or "{}"
        try:
            args = json.dumps(json.loads(raw) if isinstance(raw, str) else raw)
        except json.JSONDecodeError:
            args = raw  # left as written: the harness reports the bad JSON back to the model
        parts.append(f'{CALL_OPEN}\n{{"name": {json.dumps(fn.get("name", ""))}, "arguments": {args}}}\n{CALL_CLOSE}')
    return "\n".join(parts)


def _token_ids(choice: dict[str, Any]) -> tuple[list[int] | None, list[float] | None]:
    content = (choice.get("logprobs") or {}).get("content") or []
    tokens = [c.get("token", "") for c in content]
    if not content or not all(t.startswith("token_id:") for t in tokens):
        return None, None
    return [int(t.removeprefix("token_id:")) for t in tokens], [float(c["logprob"]) for c in content]


class ChatEndpointPolicy:
    """One episode's policy. Each turn's sampling seed is derived from `seed` and the turn index, so an
    episode replays exactly on a server that honours `seed` (vLLM does)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        temperature: float,
        seed: int = 0,
        token_ids: bool = True,
        timeout_s: float = 300.0,
        api_key: str | None = None,
        session_id: str | None = None,
        fmt: ModuleType = hermes,
    ) -> None:
        self.url, self.model = completions_url(base_url), model
        self.fmt = fmt  # the format the harness reads the served model's calls in
        self.session_id = session_id
        self.temperature = temperature
        self.seed, self.token_ids, self.timeout_s, self.api_key = seed, token_ids, timeout_s, api_key
        self._turn = 0

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int) -> AssistantTurn:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": self.temperature,
            "seed": self.seed * 1_000_003 + self._turn,
        }
        if tools:
            body["tools"] = tools
        if self.token_ids:
            body |= {"logprobs": True, "return_tokens_as_token_ids": True}
        self._turn += 1
        try:
            resp = _request(self.url, body, self.timeout_s, self.api_key, session_id=self.session_id)
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace")[:300]
            if e.code == 400 and "context" in detail.lower():
                # The conversation outgrew the model's context: an empty turn, which the harness
                # counts as malformed, as the local HF policy does.
                return AssistantTurn(text="", token_ids=[], logprobs=[])
            raise EndpointError(f"{self.url}: HTTP {e.code}: {detail}") from None
        try:
            choice = resp["choices"][0]
            msg = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise EndpointError(f"{self.url}: not a chat completion: {json.dumps(resp)[:300]}") from None
        text = msg.get("content") or ""
        if msg.get("reasoning_content"):  # a reasoning model's <think> part, split off by the server
            text = f"<think>{msg['reasoning_content']}</think>{text}"
        if msg.get("tool_calls"):
            text = "\n".join(p for p in (text, _calls_as_text(msg["tool_calls"], self.fmt)) if p)
        ids, logprobs = _token_ids(choice)
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return AssistantTurn(text=text, token_ids=ids, logprobs=logprobs, finish=finish)
