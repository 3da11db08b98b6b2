"""The harness's budgets for one episode (harnessrl/harness/episode.py), and its context policy."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from harnessrl.config.base import Strict


class ContextConfig(Strict):
    """What the harness does when an episode's context fills up (harnessrl/harness/context.py)."""

    policy: Literal["none", "truncate", "summarize"] = "none"
    budget: int | None = Field(None, gt=0, description="context tokens the policy may hold; None: no cap")
    trigger: int | None = Field(None, gt=0, description="summarize: context tokens at which the policy summarizes")
    summary_max_tokens: int = Field(256, gt=0, description="summarize: the cap on one summary turn")
    max_summaries: int = Field(3, ge=0, description="summarize: compactions per episode; one more ends it")

    @model_validator(mode="after")
    def _complete(self) -> ContextConfig:
        if self.policy != "none" and self.budget is None:
            raise ValueError(f"context policy {self.policy!r} needs a budget")
        if self.policy == "summarize":
            if self.trigger is None:
                raise ValueError("context policy 'summarize' needs a trigger")
            if self.trigger + self.summary_max_tokens > self.budget:  # type: ignore[operator]
                raise ValueError("trigger + summary_max_tokens must fit in the budget (the summary turn must fit)")
        return self

    @property
    def counts_tokens(self) -> bool:
        """Whether the harness must count the context before each turn."""
        return self.policy != "none" or self.budget is not None


class Budgets(Strict):
    """What bounds an episode (harnessrl/harness/episode.py). Three token budgets, each named, each its
    own stop reason: the per-turn cap (a turn that hits it is marked `capped`), the episode's generated
    tokens, and the context the policy may hold (`context.budget`, with the policy that manages it).
    The defaults are the production harness's (`harnessrl agent`); a stage derives its own from its
    config (`episode_budgets`)."""

    max_turns: int = Field(30, gt=0)  # assistant turns; summaries are counted apart (context.max_summaries)
    max_turn_tokens: int = Field(1024, gt=0)  # the per-turn cap
    max_tokens: int = Field(32768, gt=0)  # generated over the episode (len(text)//4 when no token ids)
    wall_s: float = 900.0  # checked between turns; commands are also cut off at the deadline
    max_calls_per_turn: int = 8
    max_parallel: int = 8  # threads running one turn's calls
    context: ContextConfig = ContextConfig()


def episode_budgets(max_turns: int, max_new_tokens: int, context: ContextConfig | None = None) -> Budgets:
    """A stage's harness budgets: its turns, its per-turn cap, and a whole episode's worth of tokens."""
    return Budgets(max_turns=max_turns, max_turn_tokens=max_new_tokens, max_tokens=max_turns * max_new_tokens,
                   context=context or ContextConfig())  # fmt: skip
