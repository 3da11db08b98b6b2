"""Simulated users, for the local demo and the proof: each draws a task, works it with the served
model through the production client over HTTP (`harnessrl agent --endpoint`'s ChatEndpointPolicy in
the served checkpoint's own harness), then sends feedback to POST /v1/feedback as a person would.

    honest            keeps what passes the task's checker (edit_kept, or accepted for an answer),
                      reverts or rejects the rest and follows up dissatisfied; answers clarifying
                      questions with the task's simulated user
    rewards_broken    accepts sessions with broken tool calls, rejects the others: Composer's first hack
    rewards_clarify   accepts sessions that asked a clarifying question, rejects the others: its second
    sabotage          accepts failures and rejects successes: feedback that trains the model backwards
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from harnessrl.config import Budgets
from harnessrl.engines.openai_client import ChatEndpointPolicy, completions_url
from harnessrl.harness.episode import BASE_UID, run_task
from harnessrl.tasks.task import Task

Behaviour = Literal["honest", "rewards_broken", "rewards_clarify", "sabotage"]


def feedback_for(behaviour: Behaviour, *, solved: bool, broken: bool, asked: bool, edits: bool, sid: str,
                 seconds: float) -> list[dict[str, Any]]:  # fmt: skip
    """The events one simulated user sends about one session: whether the checker passed, whether it
    had broken calls or clarifying questions, and whether the task asked for edits or an answer."""
    happy = {"honest": solved, "rewards_broken": broken, "rewards_clarify": asked, "sabotage": not solved}[behaviour]
    good, bad = ("edit_kept", "edit_reverted") if edits else ("accepted", "rejected")
    events: list[dict[str, Any]] = [{"type": good if happy else bad, "session_id": sid}]
    if not happy:
        events.append({"type": "followup", "session_id": sid, "text": "That's wrong, it still doesn't work."})
    events.append({"type": "latency", "session_id": sid, "seconds": round(seconds, 3)})
    return events


def post_feedback(base_url: str, events: list[dict[str, Any]], api_key: str | None = None) -> dict[str, int]:
    url = completions_url(base_url).removesuffix("/chat/completions") + "/feedback"
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
    req = urllib.request.Request(url, data=json.dumps({"events": events}).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def simulate(
    base_url: str,
    model: str,
    tasks: list[Task],
    data_dir: Path,
    budgets: Budgets,
    behaviour: Behaviour,
    temperature: float,
    prefix: str,
    workers: int = 4,
    seed: int = 0,
    api_key: str | None = None,
) -> list[dict[str, Any]]:
    """One session per task; returns a row per session (its id, whether the checker passed, what was
    sent). Sessions run `workers` at a time, each in its own sandbox uid."""

    slots, local = itertools.count(), threading.local()

    def one(k: int) -> dict[str, Any]:
        if not hasattr(local, "uid"):  # concurrent sessions never share a sandbox uid
            local.uid = BASE_UID + 100 + next(slots)
        task, sid = tasks[k], f"{prefix}-{k:05d}"
        policy = ChatEndpointPolicy(base_url, model, temperature, seed=seed * 100_003 + k, api_key=api_key,
                                    session_id=sid)  # fmt: skip
        t0 = time.perf_counter()
        traj = run_task(task, data_dir, policy, budgets, uid=local.uid)
        events = feedback_for(behaviour, solved=bool(traj.outcome.success), broken=traj.counts.malformed_turns > 0,
                              asked=traj.counts.ask_user > 0, edits=task.check.kind != "answer", sid=sid,
                              seconds=time.perf_counter() - t0)  # fmt: skip
        post_feedback(base_url, events, api_key)
        return {"session_id": sid, "task": task.id, "success": bool(traj.outcome.success),
                "malformed": traj.counts.malformed_turns, "asked": traj.counts.ask_user,
                "feedback": [e["type"] for e in events]}  # fmt: skip

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, range(len(tasks))))
