"""A local HF checkpoint as a harness Policy: the same episode loop as production, driven by our model.

Each turn renders the conversation exactly as training renders it (harnessrl.model.tokenizer), samples
with the `hf` engine, and hands back the text with the exact token ids and behaviour logprobs.
"""

from __future__ import annotations

import itertools
from typing import Any

from harnessrl.engines.hf import generate, stop_ids
from harnessrl.harness.episode import AssistantTurn
from harnessrl.model.tokenizer import CHAT_TEMPLATE, render_ids


class HFPolicy:
    def __init__(self, model, tok, temperature: float, max_new_tokens: int, seed: int = 0) -> None:
        self.model, self.tok = model, tok
        self.temperature, self.max_new_tokens = temperature, max_new_tokens
        self._seeds = itertools.count(seed * 1_000_003)
        self._stop = set(stop_ids(tok))
        self.context = model.config.max_position_embeddings

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        if self.tok.chat_template == CHAT_TEMPLATE:
            # The tiny model's system prompt names its tools; it was never trained on schemas, so the
            # OpenAI tool list is not rendered for it.
            return render_ids(self.tok, messages, add_generation_prompt=True)[0]
        # A real model reads the tools through its own chat template, as it was trained to.
        return list(
            self.tok.apply_chat_template(
                messages, tools=tools or None, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int) -> AssistantTurn:
        prompt = self.prompt_ids(messages, tools)
        room = min(self.max_new_tokens, max_tokens, self.context - len(prompt))
        if room <= 0:  # the context is full: an empty turn, which the harness counts as malformed
            return AssistantTurn(text="", token_ids=[], logprobs=[])
        (c,) = generate(self.model, self.tok, [prompt], room, self.temperature, next(self._seeds))
        body = c.token_ids[:-1] if c.token_ids and c.token_ids[-1] in self._stop else c.token_ids
        return AssistantTurn(text=self.tok.decode(body), token_ids=c.token_ids, logprobs=c.logprobs)
