"""A local HF checkpoint as a harness Policy: the same episode loop as production, driven by our model.

Each turn renders the conversation as training does (harnessrl.model.prompts), samples with the
`hf` engine, and hands back the text with the exact prompt ids, token ids and behaviour logprobs.
"""

from __future__ import annotations

import itertools
from typing import Any

from harnessrl.engines.hf import generate
from harnessrl.harness.episode import AssistantTurn
from harnessrl.model.prompts import PromptRenderer


class HFPolicy:
    def __init__(self, model, tok, temperature: float, seed: int = 0) -> None:
        self.model, self.temperature = model, temperature
        self.renderer = PromptRenderer(tok, model.config.max_position_embeddings)
        self._seeds = itertools.count(seed * 1_000_003)

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int) -> AssistantTurn:
        prompt = self.renderer.prompt_ids(messages, tools)
        room = self.renderer.room(prompt, max_tokens)
        if room <= 0:  # the model's context is full: an empty turn, which the harness counts as malformed
            return AssistantTurn(text="", token_ids=[], logprobs=[], prompt_ids=prompt, finish="length")
        (c,) = generate(self.model, self.renderer.tok, [prompt], room, self.temperature, next(self._seeds))
        return self.renderer.turn(prompt, c.token_ids, c.logprobs, room)
