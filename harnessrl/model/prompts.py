"""How one model reads a conversation: the one place prompts are rendered into token ids.

The rollout batcher, the local policy, the Ray environment workers and the context counter all go
through a `PromptRenderer`, so a turn is sampled, counted and trained on the same ids. A tiny model's
ChatML is rendered segment by segment (harnessrl.model.tokenizer.render_ids, drift-free, and each
segment's ids are cached: an episode re-renders a growing prefix every turn); a real model renders
through its own chat template, with the request's tools, as it was trained to.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from harnessrl.harness.episode import AssistantTurn
from harnessrl.harness.formats import hermes
from harnessrl.model.tokenizer import CHAT_TEMPLATE, render_ids, segments, stop_ids


class PromptRenderer:
    def __init__(self, tok, context: int, fmt: ModuleType = hermes) -> None:
        self.tok = tok
        self.context = context  # the model's context length
        self.fmt = fmt  # how the model writes tool calls: the harness parses its turns in this format
        self.stop = frozenset(stop_ids(tok))
        self._chatml = tok.chat_template == CHAT_TEMPLATE
        self._encode = functools.lru_cache(maxsize=1 << 14)(
            lambda text: tuple(tok.encode(text, add_special_tokens=False))
        )

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """The ids the engine is given for the next assistant turn."""
        if self._chatml:
            return [i for text, _ in segments(messages, tools, add_generation_prompt=True) for i in self._encode(text)]
        return self._render(messages, tools, add_generation_prompt=True)

    def conversation_ids(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> tuple[list[int], list[bool]]:
        """A whole conversation's ids and, per id, whether it is the assistant's own output (what SFT
        trains on): each assistant turn exactly as `prompt_ids` would have prompted it, with the
        tools, so SFT and rollouts see the same prompts. A template renders the conversation up to a
        turn with the generation prompt, then through the turn: the turn's ids, up to its end-of-turn
        token, are the difference."""
        if self._chatml:
            return render_ids(self.tok, messages, tools=tools)
        ids: list[int] = []
        mask: list[bool] = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before, through = self.prompt_ids(messages[:i], tools), self._render(messages[: i + 1], tools)
            if through[: len(before)] != before or before[: len(ids)] != ids:
                raise ValueError(f"the chat template does not render assistant message {i} as a continuation of "
                                 "the conversation before it, so its turns cannot be trained as prompted")  # fmt: skip
            turn = through[len(before) :]
            end = next((k + 1 for k, t in enumerate(turn) if t in self.stop), len(turn))
            ids += before[len(ids) :] + turn[:end]
            mask += [False] * (len(before) - len(mask)) + [True] * end
        rest = self._render(messages, tools)[len(ids) :]
        return ids + rest, mask + [False] * len(rest)

    def _render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, add_generation_prompt: bool = False
    ) -> list[int]:
        """The ids the model's own chat template gives the conversation."""
        return list(
            self.tok.apply_chat_template(
                messages,
                tools=tools or None,
                add_generation_prompt=add_generation_prompt,
                tokenize=True,
                return_dict=False,
            )
        )

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        """Context tokens of a conversation: the harness's TokenCounter for this model."""
        return len(self.prompt_ids(messages, tools))

    def room(self, prompt: list[int], max_tokens: int) -> int:
        """How many tokens the next turn may have: its cap, within the model's context."""
        return min(max_tokens, self.context - len(prompt))

    def turn(self, prompt: list[int], token_ids: list[int], logprobs: list[float], room: int) -> AssistantTurn:
        """A sampled completion as the harness's turn: its text without the end-of-turn token, and
        `finish="length"` when it ran into its cap instead."""
        stopped = bool(token_ids) and token_ids[-1] in self.stop
        body = token_ids[:-1] if stopped else token_ids
        return AssistantTurn(
            text=self.tok.decode(body),
            token_ids=token_ids,
            logprobs=logprobs,
            prompt_ids=prompt,
            finish="stop" if stopped or len(token_ids) < room else "length",
        )
