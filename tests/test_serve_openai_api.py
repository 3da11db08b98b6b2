"""`harnessrl serve` as clients see it: the official openai client, streaming, OpenAI-shaped 4xx errors
that leave the server up, a token-faithful session log that loses nothing under concurrent load,
feedback, and a hot swap that drops no request. The smoke recipe's base checkpoint, served by the
CLI in a subprocess on loopback."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest

from harnessrl.lineage.manifest import read_manifest
from harnessrl.serve.process import start_server, stop_server
from harnessrl.serve.session_log import read_log

openai = pytest.importorskip("openai", reason="the test extra installs the openai client")
TOOLS = [{"type": "function", "function": {"name": "grep", "description": "search the repository",
          "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}}}}]  # fmt: skip


@pytest.fixture(scope="module")
def server(tiny_base: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    live = tmp_path_factory.mktemp("serve") / "live"
    proc, url = start_server(tiny_base["base"], live)
    try:
        yield url, live, tiny_base["base"]
    finally:
        stop_server(proc)


def client(url: str):
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)


def test_completion_is_logged_token_for_token(server) -> None:
    from harnessrl.model.checkpoint import load
    from harnessrl.model.prompts import PromptRenderer

    url, live, ckpt = server
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "What is X?"}]
    resp = client(url).chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=12,
                                               temperature=1.0, extra_headers={"X-Session-Id": "one"})  # fmt: skip
    version = read_manifest(ckpt)["manifest_hash"]
    assert resp.system_fingerprint == version
    assert resp.usage.completion_tokens <= 12
    (record,) = [r for r in read_log(live / "sessions.jsonl")[0] if r["session_id"] == "one"]
    model, tok = load(ckpt)
    renderer = PromptRenderer(tok, model.config.max_position_embeddings)
    assert record["prompt_ids"] == renderer.prompt_ids(messages, TOOLS)  # the exact ids sampled from
    assert len(record["completion_ids"]) == len(record["logprobs"]) == resp.usage.completion_tokens
    assert all(lp <= 0 for lp in record["logprobs"])
    assert record["policy_version"] == version and record["tools"] == ["grep"]
    assert 0 < record["ttft_s"] <= record["total_s"]
    assert resp.choices[0].message.content == record["text"] or resp.choices[0].message.tool_calls
    # Either way the logged text is the completion's ids decoded: what the model wrote, tags and all.
    assert record["text"] == tok.decode([t for t in record["completion_ids"] if t not in renderer.stop])


def test_logged_logprobs_are_what_the_trainer_computes(server) -> None:
    """The live cycle trains on logged turns with their logged behaviour logprobs: those must be the
    trainer's own logprobs of the logged ids under the sampling temperature, or every importance weight
    is off."""
    import torch

    from harnessrl.model.checkpoint import load
    from harnessrl.rl.trainer import Sample, completion_logprobs

    url, live, ckpt = server
    for temperature in (1.0, 0.7):
        client(url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "align"}],
                                            max_tokens=10, temperature=temperature,
                                            extra_headers={"X-Session-Id": f"align-{temperature}"})  # fmt: skip
        (r,) = [r for r in read_log(live / "sessions.jsonl")[0] if r["session_id"] == f"align-{temperature}"]
        model, tok = load(ckpt)
        sample = Sample(r["prompt_ids"], r["completion_ids"], r["logprobs"], 0.0)
        with torch.no_grad():
            (trainer,) = completion_logprobs(model, [sample], tok.pad_token_id, r["temperature"])
        assert torch.allclose(trainer, torch.tensor(r["logprobs"]), atol=1e-4), (trainer, r["logprobs"])


def test_stream_matches_the_completion(server) -> None:
    url, _, _ = server
    args = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16, "temperature": 0}
    whole = client(url).chat.completions.create(**args).choices[0].message.content
    chunks = list(client(url).chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole
    assert chunks[-1].usage.completion_tokens == 16
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b'{"model": "tiny", "messages": [', 400, None),
        (json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "bogus": 1}), 400, "bogus"),
        (json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "x " * 5000}]}), 400, "messages"),
        (
            json.dumps(
                {
                    "model": "tiny",
                    "messages": [{"role": "user", "content": "x"}],
                    "tools": [{"type": "function", "function": {"name": "g", "parameters": {"type": "string"}}}],
                }
            ),
            400,
            "tools.0.function.parameters",
        ),
        (json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "n": 2}), 400, "body"),
        (json.dumps({"model": "other", "messages": [{"role": "user", "content": "x"}]}), 404, "model"),
        (json.dumps({"model": "tiny", "messages": []}), 400, "messages"),
        (b"x" * (5 << 20), 413, None),
    ],
    ids=["bad-json", "unknown-field", "too-long", "bad-tool", "n", "model", "no-messages", "huge"],
)
def test_bad_requests_get_openai_errors_and_the_server_stays_up(server, body, status, param) -> None:
    url, _, _ = server
    r = httpx.post(url + "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"]
    if param:
        assert err["param"] == param
    assert httpx.get(url + "/health").json()["status"] == "ok"


def test_openai_client_raises_its_own_error_types(server) -> None:
    url, _, _ = server
    with pytest.raises(openai.BadRequestError) as e:
        client(url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x " * 5000}])
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError):
        client(url).chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "x"}])


def test_concurrent_sessions_lose_nothing(server) -> None:
    url, live, _ = server
    n, errors = 12, []

    def session(k: int) -> None:
        messages = [{"role": "user", "content": f"task {k}"}]
        try:
            for _ in range(2):
                r = client(url).chat.completions.create(model="tiny", messages=messages, max_tokens=8,
                                                        extra_headers={"X-Session-Id": f"load-{k}"})  # fmt: skip
                messages += [{"role": "assistant", "content": r.choices[0].message.content or ""},
                             {"role": "user", "content": "go on"}]  # fmt: skip
        except Exception as e:  # collected, so the assertion below shows every failure
            errors.append(repr(e))

    threads = [threading.Thread(target=session, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    records, torn = read_log(live / "sessions.jsonl")
    load = [r for r in records if r["session_id"].startswith("load-")]
    assert torn == 0 and len(load) == 2 * n
    assert {r["session_id"] for r in load} == {f"load-{k}" for k in range(n)}


def test_feedback_is_validated_counted_and_stored_once(server) -> None:
    url, live, _ = server
    client(url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=2,
                                        extra_headers={"X-Session-Id": "fb"})  # fmt: skip
    events = [{"type": "accepted", "session_id": "fb", "event_id": "e1"},
              {"type": "followup", "session_id": "fb", "text": "still broken"},
              {"type": "latency", "session_id": "nobody", "seconds": 1.5}]  # fmt: skip
    assert httpx.post(url + "/v1/feedback", json={"events": events}).json() == {
        "stored": 3, "duplicate": 0, "unknown_session": 1}  # fmt: skip
    assert httpx.post(url + "/v1/feedback", json=events[0]).json()["duplicate"] == 1
    bad = httpx.post(url + "/v1/feedback", json={"events": [{"type": "followup", "session_id": "fb", "oops": 1}]})
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("events[0].oops: unknown field")
    stored, _ = read_log(live / "feedback.jsonl")
    assert [e["type"] for e in stored] == ["accepted", "followup", "latency"]


def swap_under_load(url: str, live: Path, new: Path, clients: int = 3, timeout_s: float = 60) -> tuple[list, list]:
    """Promote `new` (served.json, as `harnessrl live` does) while `clients` threads keep asking until
    one is answered by it; returns the versions that answered, in order, and any errors."""
    fresh, versions, errors = read_manifest(new)["manifest_hash"], [], []
    stop_at = time.monotonic() + timeout_s

    def ask() -> None:
        while time.monotonic() < stop_at and fresh not in versions:
            try:
                r = client(url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}],
                                                        max_tokens=8)  # fmt: skip
                versions.append(r.system_fingerprint)
            except Exception as e:
                errors.append(repr(e))

    threads = [threading.Thread(target=ask) for _ in range(clients)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    served = json.loads((live / "served.json").read_text())
    (live / "served.json.tmp").write_text(json.dumps(served | {"checkpoint": str(new)}))
    (live / "served.json.tmp").replace(live / "served.json")
    for t in threads:
        t.join()
    return versions, errors


def test_hot_swap_drops_nothing_and_names_each_version(server, tmp_path: Path) -> None:
    import torch

    from harnessrl.lineage.manifest import write_manifest
    from harnessrl.model.checkpoint import load, save

    url, live, ckpt = server
    model, tok = load(ckpt)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)  # other weights: another version
    new = tmp_path / "new"
    save(model, tok, new)
    write_manifest(new, stage="live", config={}, parent=ckpt, data_md5=None, metrics={}, started=0.0, seed=0,
                   world_size=1)  # fmt: skip
    shutil.copy(live / "served.json", tmp_path / "served.json")
    versions, errors = swap_under_load(url, live, new)
    assert errors == []
    old, fresh = read_manifest(ckpt)["manifest_hash"], read_manifest(new)["manifest_hash"]
    assert versions[0] == old and set(versions) == {old, fresh}
    assert httpx.get(url + "/health").json()["policy_version"] == fresh
    # Back, with no request in flight: an idle server swaps too.
    (live / "served.json").write_text((tmp_path / "served.json").read_text())
    deadline = time.monotonic() + 30
    while httpx.get(url + "/health").json()["policy_version"] != old and time.monotonic() < deadline:
        time.sleep(0.2)
    assert httpx.get(url + "/health").json()["policy_version"] == old


def test_an_api_key_guards_every_v1_route(tiny_base: dict[str, Path], tmp_path: Path) -> None:
    proc, url = start_server(tiny_base["base"], tmp_path / "live", "--api-key", "s3cret")
    try:
        with pytest.raises(openai.AuthenticationError):
            client(url).models.list()  # client() sends the key "none"
        ok = openai.OpenAI(base_url=url + "/v1", api_key="s3cret", max_retries=0)
        assert ok.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=2)
        r = httpx.post(url + "/v1/feedback", json={"type": "accepted", "session_id": "a"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(url + "/health").status_code == 200  # liveness stays open
    finally:
        stop_server(proc)
