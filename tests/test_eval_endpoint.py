"""The OpenAI-compatible client against a chat-completions server on loopback that serves the tiny
model: a served model is benchmarked by the same code, and gives the same numbers as the checkpoint."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harnessrl.engines.openai_client import ChatEndpointPolicy, EndpointError, _calls_as_text, served_model
from harnessrl.harness.protocol import parse_turn
from harnessrl.harness.tools import select
from tests.conftest import run_cli


class _ChatHandler(BaseHTTPRequestHandler):
    """/v1/models and /v1/chat/completions, the way vLLM answers them (token ids as "token_id:N")."""

    def log_message(self, *args) -> None:  # quiet test output
        pass

    def _send(self, code: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    def do_POST(self) -> None:
        from harnessrl.engines.hf import generate
        from harnessrl.model.tokenizer import EOS, IM_END

        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body.get("model") != "tiny":
            return self._send(404, {"error": {"message": f"model {body.get('model')} not found"}})
        model, tok = srv.model, srv.tok
        # The model's own chat template, as vLLM renders it (the tiny template leaves the tool list out).
        prompt = srv.render.prompt_ids(body["messages"], body.get("tools"))
        room = min(body["max_tokens"], model.config.max_position_embeddings - len(prompt))
        if room <= 0:
            return self._send(400, {"error": {"message": "This model's maximum context length is exceeded"}})
        with srv.lock:  # one generate at a time: the model is shared
            srv.requests += 1
            (c,) = generate(model, tok, [prompt], room, body.get("temperature", 1.0), body.get("seed") or 0)
        stop = {tok.convert_tokens_to_ids(t) for t in (IM_END, EOS)}
        stopped = bool(c.token_ids) and c.token_ids[-1] in stop
        text = tok.decode(c.token_ids[:-1] if stopped else c.token_ids)
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "finish_reason": "stop" if stopped else "length"}  # fmt: skip
        if body.get("logprobs") and body.get("return_tokens_as_token_ids"):
            choice["logprobs"] = {
                "content": [
                    {"token": f"token_id:{i}", "logprob": lp} for i, lp in zip(c.token_ids, c.logprobs, strict=True)
                ]
            }
        self._send(200, {"object": "chat.completion", "model": "tiny", "choices": [choice],
                         "usage": {"completion_tokens": len(c.token_ids)}})  # fmt: skip


@pytest.fixture(scope="module")
def server(tiny_base: dict[str, Path]):
    from harnessrl.model.checkpoint import load

    srv = ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
    from harnessrl.model.prompts import PromptRenderer

    srv.model, srv.tok = load(tiny_base["base"])
    srv.render = PromptRenderer(srv.tok, srv.model.config.max_position_embeddings)
    srv.lock, srv.requests = threading.Lock(), 0
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_a_turn_through_the_endpoint_equals_the_local_policy_token_for_token(server, tiny_base) -> None:
    from harnessrl.engines.policy import HFPolicy

    srv, url = server
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Where is X?"}]
    local = HFPolicy(srv.model, srv.tok, temperature=0.0)(messages, [], 16)
    remote = ChatEndpointPolicy(url, served_model(url), temperature=0.0)(messages, [], 16)
    assert remote.text == local.text and remote.token_ids == local.token_ids
    assert remote.logprobs == pytest.approx(local.logprobs, abs=1e-5)
    assert len(remote.token_ids) > 0
    # Without the token-id extension the turn still comes back, with no ids (the harness estimates).
    plain = ChatEndpointPolicy(url, "tiny", 0.0, token_ids=False)(messages, [], 16)
    assert plain.text == local.text and plain.token_ids is None


def test_endpoint_errors_name_the_url_and_a_full_context_is_an_empty_turn(server) -> None:
    _, url = server
    with pytest.raises(EndpointError, match=r"/chat/completions: HTTP 404: .*not found"):
        ChatEndpointPolicy(url, "no-such-model", 0.0)([{"role": "user", "content": "hi"}], [], 8)
    huge = [{"role": "user", "content": "x " * 3000}]  # longer than the tiny model's 1024 positions
    turn = ChatEndpointPolicy(url, "tiny", 0.0)(huge, [], 8)
    assert turn.text == "" and turn.token_ids == []


def test_structured_tool_calls_become_the_harness_text_protocol() -> None:
    text = _calls_as_text(
        [
            {"type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}},
            {"type": "function", "function": {"name": "list_dir", "arguments": "{}"}},
        ]
    )
    parsed = parse_turn(text, select(["read_file", "list_dir"]), 8)
    assert parsed.kind == "tool_calls"
    assert [(c.name, c.arguments) for c in parsed.calls] == [("read_file", {"path": "a.py"}), ("list_dir", {})]
    # Bad JSON from the server's parser stays bad: the harness tells the model, never repairs it.
    assert parse_turn(_calls_as_text([{"function": {"name": "read_file", "arguments": "{oops"}}]),
                      select(["read_file"]), 8).kind == "malformed"  # fmt: skip


def test_eval_endpoint_and_checkpoint_give_the_same_numbers(server, tiny_base, tmp_path: Path) -> None:
    srv, url = server
    common = ["--suite", "lookup", "--num-tasks", "3", "--max-turns", "2", "--max-new-tokens", "12"]
    common += ["--data", str(tiny_base["data"])]
    assert run_cli("eval", "--checkpoint", str(tiny_base["base"]), *common, "-o", str(tmp_path / "ckpt")) == 0
    before = srv.requests
    assert run_cli("eval", "--endpoint", url, *common, "-o", str(tmp_path / "ep")) == 0
    assert srv.requests - before >= 3  # the endpoint really served the episodes

    def numbers(out: str) -> dict:
        result = json.loads((tmp_path / out / "report.json").read_text())["results"][0]
        return {k: v for k, v in result["suites"]["lookup"].items() if k != "wall_s"}

    assert numbers("ckpt") == numbers("ep")
    assert numbers("ep")["episodes"] == 3 and numbers("ep")["tokens"]["value"] > 0
    report = json.loads((tmp_path / "ep" / "report.json").read_text())
    assert report["results"][0]["stage"] == "endpoint" and report["results"][0]["path"] == url
