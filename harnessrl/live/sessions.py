"""Collect: the served sessions not yet trained on, joined with their feedback, and each one's reward.

A session is ready when it has outcome feedback (an edit kept or reverted, an answer accepted or
rejected, a follow-up), or when `live.session_timeout_s` has passed since its last turn. Everything
the join meets is counted, never silently dropped: feedback for sessions never logged, duplicates,
events that arrived out of order, sessions from another policy version, turns without behaviour
logprobs, turns sampled at another temperature than the trainer's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnessrl.config import LiveConfig, RewardConfig
from harnessrl.harness import formats
from harnessrl.harness.protocol import parse_turn
from harnessrl.harness.tools import ALL_TOOLS, select
from harnessrl.live.feedback import OUTCOMES, Dissatisfaction
from harnessrl.serve.openai_api import split_tool_calls
from harnessrl.serve.server import FEEDBACK, SESSIONS
from harnessrl.serve.session_log import read_log

SIGNALS = ("edit_kept", "edit_reverted", "accepted", "rejected", "dissatisfied", "latency")


@dataclass
class Session:
    id: str
    turns: list[dict[str, Any]]  # session-log records, in the order served
    events: list[dict[str, Any]] = field(default_factory=list)  # its feedback, by event time

    @property
    def last_time(self) -> float:
        return max(t["time"] for t in self.turns)

    @property
    def versions(self) -> set[str]:
        return {t["policy_version"] for t in self.turns}


def malformed(turn: dict[str, Any]) -> bool:
    """Whether a logged turn's tool calls are broken, in the tool-call format the served checkpoint
    writes (logs from before formats were recorded are Hermes): judged as the harness judges them when
    every offered tool is one of the harness's, else by whether the format's parser reads its calls."""
    text, offered = turn["text"], turn["tools"]
    fmt = formats.load(turn.get("tool_format", "hermes"))
    if offered and all(n in ALL_TOOLS for n in offered):
        return parse_turn(text, select(offered), fmt=fmt).kind == "malformed"
    parts = fmt.split(text)  # a call attempted: one read whole, or one left open
    attempted = bool(parts.bodies) or any(p.kind == formats.UNCLOSED for p in parts.problems)
    return attempted and not split_tool_calls(text, fmt)[1]


def clarifying(turn: dict[str, Any]) -> int:
    return sum(c["name"] == "ask_user" for c in turn["tool_calls"])


def session_reward(s: Session, reward: RewardConfig, dissatisfied: Dissatisfaction) -> dict[str, float]:
    """A session's reward by named component: the production signals, weighted by reward.live, and
    the turns' malformed calls and clarifying questions, weighted as the simulated rewards weigh them."""
    w = reward.live
    kinds = Counter(e["type"] for e in s.events)
    return {
        "edit_kept": w.edit_kept * kinds["edit_kept"],
        "edit_reverted": w.edit_reverted * kinds["edit_reverted"],
        "accepted": w.accepted * kinds["accepted"],
        "rejected": w.rejected * kinds["rejected"],
        "dissatisfied": w.dissatisfied * sum(dissatisfied(e) for e in s.events if e["type"] == "followup"),
        "latency": w.latency * sum(e["seconds"] for e in s.events if e["type"] == "latency"),
        "malformed": reward.malformed * sum(malformed(t) for t in s.turns),
        "clarify": reward.clarify * sum(clarifying(t) for t in s.turns),
    }


@dataclass
class Collected:
    sessions: list[Session]  # ready, on-policy (or IS-corrected), trainable: the cycle's batch
    counts: Counter  # what the join met, by name
    waiting: int  # sessions not ready yet: the next cycle takes them


def collect(live_dir: Path, consumed: dict[str, dict], served_version: str, cfg: LiveConfig, temperature: float,
            now: float) -> Collected:  # fmt: skip
    """`consumed`: the sessions earlier cycles used, with how many turns and events each had then; what
    a used session gained since is counted (late_turns, late_events), never trained on."""
    live_dir = Path(live_dir)
    turns, torn_turns = read_log(live_dir / SESSIONS)
    events, torn_events = read_log(live_dir / FEEDBACK)
    counts: Counter = Counter(torn_session_lines=torn_turns, torn_feedback_lines=torn_events)
    by_id: dict[str, Session] = {}
    for t in turns:
        by_id.setdefault(t["session_id"], Session(t["session_id"], [])).turns.append(t)
    seen: set[str] = set()
    latest: dict[str, float] = {}
    for e in events:  # in arrival order
        if e["event_id"] in seen:
            counts["duplicate_events"] += 1
            continue
        seen.add(e["event_id"])
        s = by_id.get(e["session_id"])
        if s is None:
            counts["unknown_session_events"] += 1
            continue
        if e["time"] < latest.get(s.id, float("-inf")):
            counts["out_of_order_events"] += 1  # kept: sorted by event time below
        latest[s.id] = max(latest.get(s.id, float("-inf")), e["time"])
        s.events.append(e)
    batch: list[Session] = []
    waiting = 0
    for s in by_id.values():
        if s.id in consumed:
            for name, now_, then in (("late_turns", len(s.turns), consumed[s.id].get("turns", 0)),
                                     ("late_events", len(s.events), consumed[s.id].get("events", 0))):  # fmt: skip
                if now_ > then:
                    counts[name] += now_ - then
            continue
        s.events.sort(key=lambda e: e["time"])
        if not any(e["type"] in OUTCOMES for e in s.events) and now - s.last_time < cfg.session_timeout_s:
            waiting += 1
            continue
        if any(t.get("logprobs") is None or len(t["logprobs"]) != len(t["completion_ids"]) for t in s.turns):
            counts["refused_no_logprobs"] += 1  # never treated as on-policy: PPO would become REINFORCE
            consumed[s.id] = {"turns": len(s.turns), "events": len(s.events)}
            continue
        if any(t["temperature"] != temperature for t in s.turns):
            counts["refused_temperature"] += 1  # its logprobs are of another distribution than the trainer's
            consumed[s.id] = {"turns": len(s.turns), "events": len(s.events)}
            continue
        if s.versions != {served_version}:
            if cfg.off_policy == "drop":
                counts["dropped_off_policy"] += 1
                consumed[s.id] = {"turns": len(s.turns), "events": len(s.events)}
                continue
            counts["importance_corrected"] += 1
        if not any(e["type"] in OUTCOMES for e in s.events):
            counts["timed_out_without_outcome"] += 1
        batch.append(s)
    batch.sort(key=lambda s: s.last_time)
    if len(batch) > cfg.max_sessions:
        counts["deferred_over_max_sessions"] += len(batch) - cfg.max_sessions
        batch = batch[: cfg.max_sessions]
    return Collected(batch, counts, waiting)
