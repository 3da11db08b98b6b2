"""Real-time RL's hack alarms, judged on one cycle's sessions before anything trains on them.

Cursor's live loop exposed two hacks: broken tool calls on hard tasks (a broken call ends a session
that would have failed anyway, and was not charged), and clarifying questions instead of risky edits.
Simulated rewards cannot show these, because they are about what people reward. So besides the rates
themselves, each monitor compares the feedback reward of the sessions that did the thing with that of
the sessions that did not: feedback that pays for broken calls or for questions is the hack's
signature, whatever the rates.
"""

from __future__ import annotations

from harnessrl.config import LiveMonitorConfig
from harnessrl.live.sessions import SIGNALS, Session, clarifying, malformed


def alarms(sessions: list[Session], rewards: list[dict[str, float]], cfg: LiveMonitorConfig) -> list[dict]:
    """One incident per alarm, each with its measure, threshold and a few session ids as examples."""
    if not sessions:
        return []
    out = []
    turns = [t for s in sessions for t in s.turns]
    broken = [any(malformed(t) for t in s.turns) for s in sessions]
    asked = [sum(clarifying(t) for t in s.turns) for s in sessions]
    feedback = [sum(r[k] for k in SIGNALS) for r in rewards]  # what people paid, without the harness's charges

    share = sum(malformed(t) for t in turns) / len(turns)
    if cfg.malformed_max is not None and share > cfg.malformed_max:
        out.append(
            incident("malformed", share, cfg.malformed_max, "of the turns had broken tool calls", sessions, broken)
        )
    per_session = sum(asked) / len(sessions)
    if cfg.clarify_max is not None and per_session > cfg.clarify_max:
        out.append(incident("clarify", per_session, cfg.clarify_max, "clarifying questions per session", sessions,
                            [a > 0 for a in asked]))  # fmt: skip
    if cfg.rewarded_gap is not None:
        for name, did, what in (
            ("rewarded_malformed", broken, "broken tool calls"),
            ("rewarded_clarify", [a > 0 for a in asked], "clarifying questions"),
        ):
            yes = [f for f, d in zip(feedback, did, strict=True) if d]
            no = [f for f, d in zip(feedback, did, strict=True) if not d]
            if min(len(yes), len(no)) < cfg.min_sessions:
                continue
            gap = sum(yes) / len(yes) - sum(no) / len(no)
            if gap > cfg.rewarded_gap:
                out.append(incident(name, gap, cfg.rewarded_gap, f"more feedback reward for sessions with {what} "
                                    "than without: the feedback pays for a hack", sessions, did))  # fmt: skip
    return out


def incident(name: str, value: float, threshold: float, what: str, sessions: list[Session], blame: list[bool]) -> dict:
    return {
        "monitor": name,
        "value": value,
        "threshold": threshold,
        "message": f"live monitor {name}: {value:.3f} {what} (threshold {threshold:g})",
        "examples": [s.id for s, b in zip(sessions, blame, strict=True) if b][:3],
    }
