"""The served model: one generation thread over a checkpoint, batching what arrives together, and a
hot swap that never drops a request.

Requests queue up as `Job`s. The thread takes every job waiting that can share a batch (same
temperature, no seed of its own: a seeded request runs alone, so its seed means what it says) and
runs one `hf` decode loop over them, handing each sampled token to its job as it comes, for
streaming. A swap loads the new checkpoint off the generation thread and hands it over between two
batches: a batch in flight finishes on the weights it started with, and every completion says which
checkpoint produced it.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from harnessrl.engines.hf import Completion, generate
from harnessrl.harness.formats import hermes, name_of
from harnessrl.model.prompts import PromptRenderer


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint and the version every response and log record names."""

    path: Path
    version: str  # the lineage manifest's seal, or the weights' digest for a folder with no manifest
    model: Any
    renderer: PromptRenderer
    fmt: ModuleType  # the tool-call format it writes, from its harness.json (Hermes without one)

    @classmethod
    def load(cls, path: Path, dtype: str) -> Checkpoint:
        from harnessrl.harness.spec import load_harness
        from harnessrl.model.checkpoint import load

        path = Path(path).resolve()
        model, tok = load(path, dtype)
        model.eval()
        spec = load_harness(path)
        renderer = PromptRenderer(tok, model.config.max_position_embeddings)
        return cls(path, checkpoint_version(path), model, renderer, spec.fmt if spec else hermes)


def checkpoint_version(path: Path) -> str:
    """The lineage manifest's seal (unique per checkpoint), or the weights' digest without a manifest."""
    from harnessrl.io import tree_digest
    from harnessrl.lineage.manifest import MANIFEST, read_manifest

    if (Path(path) / MANIFEST).is_file():
        return read_manifest(path)["manifest_hash"]
    return "sha256:" + tree_digest(Path(path))


@dataclass
class Job:
    """One request's generation. The callbacks run on the generation thread."""

    prompt: list[int]
    room: int  # the most tokens it may have
    temperature: float
    seed: int | None
    on_token: Callable[[int, float], None]
    on_done: Callable[[Completion | BaseException, Checkpoint, float | None], None]  # completion, weights, ttft
    submitted: float = field(default_factory=time.perf_counter)


MAX_WAITING = 1024  # requests queued beyond this get a 503: a flood must not grow memory without bound
SWAP = "swap"  # queued by swap(): wakes the generation thread to take the new checkpoint


class SwapError(ValueError):
    """A checkpoint that cannot replace the served one; the served one stays."""


class Generator:
    def __init__(self, checkpoint: Checkpoint, max_batch: int = 8, seed: int = 0) -> None:
        self.current = checkpoint
        self.max_batch = max_batch
        self._incoming: tuple[Checkpoint, threading.Event] | None = None
        self._jobs: queue.Queue[Job | str | None] = queue.Queue()
        self._seeds = itertools.count(seed * 1_000_003)  # for batches of unseeded requests
        self._swap_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="harnessrl-generate", daemon=True)
        self._thread.start()

    @property
    def renderer(self) -> PromptRenderer:
        return self.current.renderer

    def submit(self, job: Job) -> bool:
        """Queue a job; False (and nothing queued) when MAX_WAITING are already waiting."""
        if self._jobs.qsize() >= MAX_WAITING:
            return False
        self._jobs.put(job)
        return True

    def swap(self, path: Path, dtype: str) -> Checkpoint:
        """Load `path` here (not on the generation thread, which keeps serving) and serve it from the
        next batch on. Refused if it reads text differently from the served one: a request already
        rendered for the old tokenizer would otherwise reach the new weights as other tokens."""
        with self._swap_lock:
            new = Checkpoint.load(path, dtype)
            old = self.current.renderer.tok
            if new.renderer.tok.get_vocab() != old.get_vocab() or new.renderer.tok.chat_template != old.chat_template:
                raise SwapError(f"{path}: its tokenizer or chat template differs from the served checkpoint's")
            if new.fmt is not self.current.fmt:
                raise SwapError(
                    f"{path}: writes tool calls as {name_of(new.fmt)}, the served checkpoint as {name_of(self.current.fmt)}"
                )
            if new.renderer.context != self.current.renderer.context:
                raise SwapError(f"{path}: context {new.renderer.context} != the served {self.current.renderer.context}")
            applied = threading.Event()
            self._incoming = (new, applied)
            self._jobs.put(SWAP)  # wakes an idle generation thread; a busy one swaps after its batch
            applied.wait()
            return new

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        waiting: list[Job] = []
        while True:
            if not waiting:
                job = self._jobs.get()
                if job is None:
                    return
                if job is SWAP:
                    self._take_swap()
                    continue
                waiting.append(job)
            while True:  # everything queued meanwhile, so it can join this batch
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    self._jobs.put(None)  # finish what is waiting, then stop
                    break
                if job is not SWAP:
                    waiting.append(job)
            self._take_swap()  # between batches, never inside one
            first = waiting[0]
            batch = [first]
            if first.seed is None:
                same = [j for j in waiting[1:] if j.seed is None and j.temperature == first.temperature]
                batch += same[: self.max_batch - 1]
            waiting = [j for j in waiting if j not in batch]
            self._run(batch, self.current)

    def _take_swap(self) -> None:
        if self._incoming is not None:
            (self.current, applied), self._incoming = self._incoming, None
            applied.set()

    def _run(self, batch: list[Job], ckpt: Checkpoint) -> None:
        stop = ckpt.renderer.stop
        counts = [0] * len(batch)
        first_token: list[float | None] = [None] * len(batch)
        finished = [False] * len(batch)

        def on_token(tokens: list[int], logprobs: list[float]) -> None:
            now = time.perf_counter()
            for i, (t, lp) in enumerate(zip(tokens, logprobs, strict=True)):
                if finished[i]:
                    continue
                if first_token[i] is None:
                    first_token[i] = now - batch[i].submitted
                batch[i].on_token(t, lp)
                counts[i] += 1
                finished[i] = t in stop or counts[i] >= batch[i].room

        seed = batch[0].seed if batch[0].seed is not None else next(self._seeds)
        try:
            out = generate(ckpt.model, ckpt.renderer.tok, [j.prompt for j in batch], max(j.room for j in batch),
                           batch[0].temperature, seed, interrupt=lambda: all(finished), on_token=on_token)  # fmt: skip
        except Exception as e:  # the server answers 500 for these requests and goes on serving
            for j in batch:
                j.on_done(e, ckpt, None)
            return
        for j, c, ttft in zip(batch, out, first_token, strict=True):
            j.on_done(Completion(c.token_ids[: j.room], c.logprobs[: j.room]), ckpt, ttft)
