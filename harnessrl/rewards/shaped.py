"""A trajectory's reward as named, weighted components, each logged.

outcome     the task's checker (run code or compare state)
malformed   per malformed turn: an explicit negative, never a dropped sample (Composer's lesson:
            dropping them taught the policy to emit broken calls on hard tasks)
turns       per turn: fewer needless turns
tokens      per 1k generated tokens: sensible length
parallel    per turn whose calls ran in parallel; calls in one turn are independent by the protocol
clarify     per clarifying question beyond what the task needs (the other reported hack)
summary_tokens  per 1k tokens of the policy's own summaries: a summary should carry what the task
            needs, not restate everything (long-horizon RL)
overlong    per episode that ran out of a budget (turns, tokens, context, summaries) instead of
            answering: an explicit negative, where SUPO's masking (stages.*.overlong_mask) gives none

Efficiency (turns, tokens, parallel, summary_tokens) is a property of a solution, so it counts only when the task was
solved. Charged on failures too, it pays the policy to give up: a one-turn guess would beat a search
that missed, and in a group that all failed, GRPO's normalization turns that small gap into a full
advantage for guessing.
"""

from __future__ import annotations

from harnessrl.config import RewardConfig
from harnessrl.harness.episode import OVERLONG, Trajectory


def reward_components(traj: Trajectory, w: RewardConfig, questions_needed: int = 0) -> dict[str, float]:
    c, solved = traj.counts, float(bool(traj.outcome.success))
    return {
        "outcome": w.outcome * solved,
        "malformed": w.malformed * c.malformed_turns,
        "turns": w.turns * c.turns * solved,
        "tokens": w.tokens * c.tokens / 1000 * solved,
        "parallel": w.parallel * c.parallel_turns * solved,
        "clarify": w.clarify * max(0, c.ask_user - questions_needed),
        "summary_tokens": w.summary_tokens * c.summary_tokens / 1000 * solved,
        "overlong": w.overlong * (traj.outcome.stop_reason in OVERLONG),
    }


def total(components: dict[str, float]) -> float:
    return sum(components.values())
