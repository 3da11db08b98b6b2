"""The live loop on the default recipe's RL checkpoint: `harnessrl serve` hands the official openai
client structured tool_calls (whole and streamed), `harnessrl agent --endpoint` solves a held-out
task through it with its turns logged under the agent's session, and a checkpoint trained on
sabotaged feedback is blocked by the gate and never served."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from harnessrl.harness.protocol import render_tools
from harnessrl.harness.tools import select
from harnessrl.serve.process import start_server, stop_server
from harnessrl.serve.session_log import read_log
from harnessrl.tasks.checkers import answer_matches
from tests.conftest import run_cli
from tests.test_agent_production_harness import final_answer
from tests.test_serve_openai_api import client
from tests.test_serving_vllm_openai import solved_task

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory):
    ckpt = (tiny_run / "checkpoints" / "rl").resolve()
    live = tmp_path_factory.mktemp("live-loop") / "live"
    proc, url = start_server(ckpt, live)
    try:
        yield url, live, ckpt
    finally:
        stop_server(proc)


def test_tool_calls_come_back_structured_whole_and_streamed(served, tiny_run: Path) -> None:
    url, _, ckpt = served
    _, task = solved_task(tiny_run, ckpt)
    args = {"model": "tiny", "messages": [{"role": "user", "content": task.instruction}],
            "tools": render_tools(select(["grep", "read_file"])), "temperature": 0.0, "max_tokens": 64}  # fmt: skip
    choice = client(url).chat.completions.create(**args).choices[0]
    assert choice.finish_reason == "tool_calls", choice
    (call,) = choice.message.tool_calls
    assert call.function.name == "grep" and json.loads(call.function.arguments) == {
        "pattern": f"^{task.solution.name} ="
    }
    chunks = list(client(url).chat.completions.create(**args, stream=True))
    deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
    assert [(d.index, d.function.name, json.loads(d.function.arguments)) for d in deltas] == [
        (0, "grep", {"pattern": f"^{task.solution.name} ="})
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_agent_through_serve_solves_a_task_and_its_session_is_logged(served, tiny_run: Path, capsys) -> None:
    url, live, ckpt = served
    data, task = solved_task(tiny_run, ckpt)
    rc = run_cli("agent", "--endpoint", url + "/v1", "--harness", str(ckpt), "--repo", str(data / task.repo),
                 task.instruction)  # fmt: skip
    out = capsys.readouterr()
    assert rc == 0 and answer_matches(task.check.answer or "", final_answer(out.out)), out.out
    session = out.err.split("session ", 1)[1].split()[0]
    turns = [r for r in read_log(live / "sessions.jsonl")[0] if r["session_id"] == session]
    assert len(turns) >= 2 and turns[0]["tool_calls"][0]["name"] == "grep"


def test_a_sabotaged_checkpoint_is_blocked_and_never_served(served, default_data: Path, capsys) -> None:
    """Feedback that accepts failures and rejects successes (the outcome's sign flipped) trains a
    worse checkpoint; the gate keeps the served one and writes an incident."""
    url, live, ckpt = served
    overrides = [f"data.dir={default_data.parent}", "live.min_sessions=32", "live.epochs=8",
                 "stages.eval.num_tasks=64"]  # fmt: skip
    before = httpx.get(url + "/health").json()["policy_version"]
    assert run_cli("live", "simulate", *overrides, "--endpoint", url + "/v1", "--model", "tiny", "--live-dir",
                   str(live), "--sessions", "32", "--behaviour", "sabotage") == 0  # fmt: skip
    assert run_cli("live", "cycle", *overrides, "--live-dir", str(live)) == 0
    (row,) = [c for c in read_log(live / "cycles.jsonl")[0] if c["result"] != "waiting"]
    assert row["result"] == "rejected", capsys.readouterr().out
    assert row["heldout_success"]["candidate"] < row["heldout_success"]["served"]
    assert json.loads((live / "served.json").read_text())["checkpoint"] == str(ckpt)
    assert httpx.get(url + "/health").json()["policy_version"] == before
    (incident,) = [i for i in read_log(live / "incidents.jsonl")[0] if i["monitor"] == "gate"]
    assert "fails the success gate" in incident["message"]
