"""Context management: what the harness does when an episode's context fills up.

Three policies, chosen per episode (config.ContextConfig):

- `none`: the context grows until it reaches its budget; the episode then ends (`context_budget`).
- `truncate`: the oldest whole turns are dropped (an assistant turn together with the tool results
  it produced, never one without the other) until a full turn fits again.
- `summarize` (Cursor's self-summarization): when the rendered context reaches `trigger` tokens, the
  harness asks the policy for a summary in a turn of its own, capped at `summary_max_tokens` and at
  the room left under the budget. The episode then goes on from [system, task, summary + task
  state]: a new segment. This can happen up to `max_summaries` times; the next trigger after that
  ends the episode (`max_summaries`). Nothing is dropped before the policy summarizes, except where a
  long tool result has carried the context past the budget itself: then the oldest turns go first
  (recorded as a truncation), rather than lose the episode. The RL stage refuses a context whose
  expert would see a truncation on its tasks (components/rl.py, check_summaries).

The harness counts context in the policy's own tokens, with the counter the caller gives it (a
model's tokenizer and chat template); without one it estimates four characters per token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# (messages, tools) -> tokens of the rendered context, as the policy's engine would see it.
TokenCounter = Callable[[list[dict[str, Any]], list[dict[str, Any]]], int]

# Short on purpose: a tiny model reads these in every compacted episode.
SUMMARIZE_REQUEST = "Context full: summarize what you still need."


def approx_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    """A counter for policies without a tokenizer (scripted experts, served models): ~4 chars a token."""
    return sum(len(m.get("content") or "") + 8 for m in messages) // 4


def state_message(summary: str, done: int, turns_left: int) -> dict[str, str]:
    """What the policy continues from after its summary: the summary and the task's state (summaries
    so far, turns left). It does not name `max_summaries`: the SFT expert's harness may allow more
    compactions than the stage does, and the policy should see the same words in both."""
    return {"role": "user", "content": f"Summary {done}:\n{summary}\n{turns_left} turns left."}


def truncate_turns(messages: list[dict[str, Any]], keep: int, fits: Callable[[list[dict[str, Any]]], bool]) -> int:
    """Drop the oldest whole turns after the first `keep` messages (the system prompt and the task)
    until `fits(messages)`; in place. A turn is an assistant message and the tool (or user) messages
    that answer it, so a call is never separated from its result. Returns how many turns went."""
    dropped = 0
    while not fits(messages):
        starts = [i for i in range(keep, len(messages)) if messages[i]["role"] == "assistant"]
        if len(starts) < 2:  # only the latest turn is left: it must stay, or the policy loses its place
            break
        del messages[starts[0] : starts[1]]
        dropped += 1
    return dropped
