"""Many episodes at once, one batched generate per turn, with deterministic results.

Each episode runs in its own thread through the ordinary harness loop. Its policy is a handle that
posts the next-turn request to the batcher and waits. When every live episode has posted (the slow
ones are still running tools), the batcher samples all of them in one batch, in episode order. The
batch is thus the same set in the same order on every run, so seeded sampling gives the same
trajectories, while generation costs one batched call per turn instead of one per episode.

Generation is a rollout engine's `generate` (`generate_fn`): the local model through the `hf` engine,
a vLLM engine, or the async fleet's remote rollout workers (harnessrl/rl/fleet.py). A completion's `version` (the policy weights that
produced it) is recorded: `versions[slot]` is the oldest version any turn of that episode was
sampled with.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from harnessrl.engines.hf import Completion
from harnessrl.harness.episode import AssistantTurn
from harnessrl.model.prompts import PromptRenderer

T = TypeVar("T")
R = TypeVar("R")
# (requests as (prompt ids, room) pairs, seed) -> one completion per request, at most `room` tokens long
GenerateFn = Callable[[list[tuple[list[int], int]], int], list[Completion]]


class LockstepBatcher:
    def __init__(self, renderer: PromptRenderer, generate_fn: GenerateFn, seed: int = 0) -> None:
        self.renderer, self.generate_fn, self.seed = renderer, generate_fn, seed
        self.versions: dict[int, int] = {}  # slot -> oldest policy version of its turns (versioned completions)
        self._cv = threading.Condition()
        self._live: set[int] = set()
        self._pending: dict[int, tuple[list[int], int]] = {}
        self._results: dict[int, AssistantTurn] = {}
        self._batches = 0
        self._error: BaseException | None = None

    def run(self, items: Sequence[T], episode: Callable[[T, Callable[..., AssistantTurn], int], R]) -> list[R]:
        """`episode(item, policy, slot)` for every item, concurrently; results in item order."""
        results: list[Any] = [None] * len(items)
        errors: list[BaseException] = []
        self._live = set(range(len(items)))

        def one(i: int) -> None:
            try:
                results[i] = episode(items[i], lambda m, tools, max_tokens: self._turn(i, m, tools, max_tokens), i)
            except BaseException as e:
                errors.append(e)
            finally:
                with self._cv:
                    self._live.discard(i)
                    self._maybe_flush()

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(items))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results

    def _turn(
        self, i: int, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int
    ) -> AssistantTurn:
        prompt = self.renderer.prompt_ids(messages, tools)
        with self._cv:
            self._pending[i] = (prompt, self.renderer.room(prompt, max_tokens))
            self._maybe_flush()
            while i not in self._results and self._error is None:
                self._cv.wait()
            if self._error is not None:
                raise RuntimeError("batched generation failed") from self._error
            return self._results.pop(i)

    def _maybe_flush(self) -> None:
        """Called with the lock held: generate once every live episode is waiting for its turn."""
        if not self._pending or set(self._pending) != self._live:
            return
        order = sorted(self._pending)
        requests = [self._pending.pop(i) for i in order]
        try:
            turns, versions = self._generate(requests)
        except BaseException as e:
            self._error = e
            self._cv.notify_all()
            raise
        self._results.update(zip(order, turns, strict=True))
        for i, v in zip(order, versions, strict=True):
            if v is not None:
                self.versions[i] = min(v, self.versions.get(i, v))
        self._cv.notify_all()

    def _generate(self, requests: list[tuple[list[int], int]]) -> tuple[list[AssistantTurn], list[int | None]]:
        # A full context gets an empty turn, which the harness counts as malformed.
        out = [AssistantTurn(text="", token_ids=[], logprobs=[], prompt_ids=p, finish="length") for p, _ in requests]
        versions: list[int | None] = [None] * len(requests)
        live = [k for k, (_, room) in enumerate(requests) if room > 0]
        if live:
            self._batches += 1
            completions = self.generate_fn([requests[k] for k in live], self.seed * 1_000_003 + self._batches)
            for k, c in zip(live, completions, strict=True):
                prompt, room = requests[k]
                # each request keeps to its own budget
                out[k] = self.renderer.turn(prompt, c.token_ids[:room], c.logprobs[:room], room)
                versions[k] = c.version
        return out, versions
