"""Real-time RL's cycle on the smoke recipe's base checkpoint: feedback ingest that stores all or
nothing, the join's counts (unknown sessions, duplicates, missing logprobs, older versions), a cycle
that trains, gates and writes a lineage manifest whose parent is the served checkpoint and whose data
is the cycle's sessions, and the monitors that catch feedback paying for Composer's two hacks."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from harnessrl.config import LiveConfig, LiveMonitorConfig, RewardConfig, compose
from harnessrl.lineage.manifest import read_manifest
from harnessrl.lineage.verify import verify
from harnessrl.live.cycle import run_cycle
from harnessrl.live.feedback import Dissatisfaction, parse_event
from harnessrl.live.monitors import alarms
from harnessrl.live.sessions import collect, session_reward
from harnessrl.live.simulate import feedback_for
from harnessrl.serve.process import start_server, stop_server
from harnessrl.serve.server import set_serving
from harnessrl.serve.session_log import AppendLog, read_log
from tests.conftest import run_cli
from tests.test_serve_openai_api import client

SMOKE = ["recipe=tiny_smoke", "live.min_sessions=4", "stages.eval.num_tasks=4", "stages.eval.max_turns=2"]


def test_append_log_heals_a_torn_line_and_readers_count_it(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"a": 1}\n{"b": ')  # a crash mid-write
    log = AppendLog(path, fsync=True)
    log.append({"c": 3})
    log.close()
    assert read_log(path) == ([{"a": 1}, {"c": 3}], 1)


def test_ingest_stores_all_or_nothing(tmp_path: Path, capsys) -> None:
    live = tmp_path / "live"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "accepted", "session_id": "a"}\n{"type": "latency", "session_id": "a", "seconds": -1}\n')
    assert run_cli("live", "ingest", str(bad), "--live-dir", str(live)) == 2
    assert f"{bad}:2.seconds" in capsys.readouterr().err
    assert not (live / "feedback.jsonl").exists()
    good = tmp_path / "good.jsonl"
    good.write_text('{"type": "accepted", "session_id": "a"}\n{"type": "accepted", "session_id": "a"}\n'
                    '{"type": "followup", "session_id": "b", "dissatisfied": true, "event_id": "x"}\n')  # fmt: skip
    assert run_cli("live", "ingest", str(good), "--live-dir", str(live)) == 0
    assert json.loads(capsys.readouterr().out) == {"stored": 2, "duplicate": 1, "unknown_session": 3}


def turn(sid: str, text: str, tools: list[str], calls: list[dict] | None = None, version: str = "v1") -> dict:
    return {"session_id": sid, "time": 1.0, "policy_version": version, "temperature": 1.0, "tools": tools,
            "prompt_ids": [1, 2], "completion_ids": [3, 4], "logprobs": [-0.5, -0.5], "text": text,
            "tool_calls": calls or [], "total_s": 0.1}  # fmt: skip


BROKEN = '<tool_call>\n{"name": "grep", "arguments": {"pattern": \n</tool_call>'
GOOD = '<tool_call>\n{"name": "grep", "arguments": {"pattern": "^X ="}}\n</tool_call>'
ASK = '<tool_call>\n{"name": "ask_user", "arguments": {"question": "which file?"}}\n</tool_call>'


@pytest.mark.parametrize(
    ("behaviour", "kind", "expected"),
    [
        ("rewards_broken", "broken", {"rewarded_malformed", "malformed"}),
        ("rewards_clarify", "ask", {"rewarded_clarify"}),  # half the sessions ask once: at clarify_max
        ("honest", "broken", {"malformed"}),
        ("honest", "ask", set()),
    ],
)
def test_monitors_catch_feedback_that_pays_for_a_hack(tmp_path: Path, behaviour, kind, expected) -> None:
    log, fb = AppendLog(tmp_path / "sessions.jsonl"), AppendLog(tmp_path / "feedback.jsonl")
    for k in range(12):
        sid, hack = f"s{k}", k % 2 == 0
        if kind == "broken":
            log.append(turn(sid, BROKEN if hack else GOOD, ["grep", "read_file"]))
        else:
            calls = [{"name": "ask_user", "arguments": "{}"}] if hack else []
            log.append(turn(sid, ASK if hack else GOOD, ["grep", "ask_user"], calls))
        solved = k % 4 == 1  # the honest user is happy with a quarter, none of them the hacks
        events = feedback_for(behaviour, solved=solved, broken=hack and kind == "broken", asked=hack and kind == "ask",
                              edits=False, sid=sid, seconds=1.0)  # fmt: skip
        for e in events:
            fb.append(parse_event(e, "event"))
    cfg = LiveConfig(min_sessions=4, monitors=LiveMonitorConfig(min_sessions=4))
    got = collect(tmp_path, set(), "v1", cfg, 1.0, now=2.0)
    assert len(got.sessions) == 12
    rewards = [session_reward(s, RewardConfig(), Dissatisfaction(cfg.dissatisfied_patterns)) for s in got.sessions]
    assert {i["monitor"] for i in alarms(got.sessions, rewards, cfg.monitors)} == expected


def log_sessions(checkpoint: Path, live: Path, n: int = 6) -> None:
    """n served sessions with honest feedback (every other one kept), plus what the join must count:
    feedback for a session never served, sent twice; a session logged without logprobs (as another
    server might log it); a session of another checkpoint."""
    proc, url = start_server(checkpoint, live)
    try:
        for k in range(n):
            sid = f"c{k}"
            r = client(url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": f"task {k}"}],
                                                    max_tokens=6, extra_headers={"X-Session-Id": sid})  # fmt: skip
            assert r.choices[0].message is not None
            events = feedback_for(
                "honest", solved=k % 2 == 0, broken=False, asked=False, edits=True, sid=sid, seconds=2
            )
            httpx.post(url + "/v1/feedback", json={"events": events}).raise_for_status()
        for _ in range(2):
            httpx.post(url + "/v1/feedback", json={"type": "accepted", "session_id": "ghost"}).raise_for_status()
        served = read_log(live / "sessions.jsonl")[0][0]
        extra = AppendLog(live / "sessions.jsonl")
        extra.append(served | {"session_id": "nolp", "logprobs": None})
        extra.append(served | {"session_id": "old", "policy_version": "another"})
        extra.close()
        for sid in ("nolp", "old"):
            httpx.post(url + "/v1/feedback", json={"type": "accepted", "session_id": sid}).raise_for_status()
    finally:
        stop_server(proc)


def test_a_cycle_trains_gates_and_records_its_lineage(tiny_base, smoke_data_root: Path, tmp_path: Path, capsys) -> None:
    live = tmp_path / "live"
    log_sessions(tiny_base["base"], live)
    rc = run_cli("live", "cycle", *SMOKE, f"data.dir={smoke_data_root}", "--live-dir", str(live))
    out = capsys.readouterr().out
    assert rc == 0, out
    (row,) = read_log(live / "cycles.jsonl")[0]
    assert row["sessions"] == 6 and row["kept_rate"] == 0.5 and row["dissatisfied_rate"] == 0.5
    assert row["counts"] == {"torn_session_lines": 0, "torn_feedback_lines": 0, "unknown_session_events": 1,
                             "refused_no_logprobs": 1, "dropped_off_policy": 1}  # fmt: skip
    assert row["result"] in ("promoted", "rejected") and row["train"]["samples"] == 6
    assert len(row["gate"]) == 4  # success and malformed, each on lookup and lookup@hydra
    candidate = live / "checkpoints" / "cycle-0001"
    m = read_manifest(candidate)
    assert m["stage"] == "live" and m["parent"]["manifest_hash"] == read_manifest(tiny_base["base"])["manifest_hash"]
    assert m["datasets"]["sessions"]["path"] == str((live / "cycles" / "0001").resolve())
    own = [c for c in verify(candidate) if c.ckpt == candidate]  # the fixture's base records no real data md5
    assert [c.what for c in own if not c.ok] == [] and {"data:sessions", "data:data", "parent"} <= {c.what for c in own}
    served_now = json.loads((live / "served.json").read_text())["checkpoint"]
    assert (served_now == str(candidate.resolve())) == (row["result"] == "promoted")
    assert "| 1 | " in (live / "report" / "live.md").read_text() and (live / "report" / "kept_rate.png").is_file()
    assert run_cli("live", "status", "--live-dir", str(live)) == 0
    status = capsys.readouterr().out
    assert f"served: {served_now}" in status and "cycle 1: " in status and "kept 0.500" in status
    # Nothing new: the next cycle waits, and uses nothing up. A turn logged late under a used session
    # is counted, never trained on.
    cfg = compose([*SMOKE, f"data.dir={smoke_data_root}"])
    if row["result"] == "promoted":  # the stopped server never swapped: until it does, cycles wait
        assert "serve still serves" in run_cycle(cfg, live, tiny_base["data"])["reason"]
        set_serving(live, Path(served_now), row["promoted"])  # as serve writes it once it has swapped
    late = AppendLog(live / "sessions.jsonl")
    late.append(read_log(live / "sessions.jsonl")[0][0] | {"request_id": "late"})
    late.close()
    again = run_cycle(cfg, live, tiny_base["data"])
    assert again["result"] == "waiting" and again["counts"]["late_turns"] == 1
    assert len(read_log(live / "cycles.jsonl")[0]) == 1


def test_a_gate_that_judges_nothing_promotes_nothing(tiny_base, smoke_data_root: Path, tmp_path: Path) -> None:
    live = tmp_path / "live"
    log_sessions(tiny_base["base"], live)
    # pass@k needs several sampled seeds; this greedy eval has none, so the gate has nothing to judge.
    cfg = compose([*SMOKE, f"data.dir={smoke_data_root}", "live.gates=[{metric: pass_at_k}]"])
    row = run_cycle(cfg, live, tiny_base["data"])
    assert row["result"] == "rejected" and row["gate"] == []
    (incident,) = [i for i in read_log(live / "incidents.jsonl")[0] if i["monitor"] == "gate"]
    assert "no gate judged the candidate" in incident["message"]
    assert json.loads((live / "served.json").read_text())["checkpoint"] == str(tiny_base["base"].resolve())
