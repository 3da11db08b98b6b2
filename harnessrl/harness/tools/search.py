"""Ranked code search over the workspace: BM25 over fixed windows of lines, in pure Python.

The hook for other backends is the `Retriever` protocol: anything with `search(query, k)` returning
`Hit`s (an embedding index, say) can be put in `ToolContext.retriever` and the `search` tool uses it.
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harnessrl.harness.tools.base import Hit, Tool, ToolContext, ToolError, truncate
from harnessrl.harness.tools.files import SKIP_DIRS

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def tokenize(text: str) -> list[str]:
    """Identifiers, lowercased, plus their snake_case and camelCase parts: `parseTurn` matches
    queries for `parse_turn`, `parse` and `turn`."""
    out: list[str] = []
    for ident in _IDENT.findall(text):
        low = ident.lower()
        out.append(low)
        parts = [p.lower() for piece in ident.split("_") for p in _CAMEL.findall(piece)]
        if len(parts) > 1:
            out.extend(parts)
    return out


@dataclass
class _Chunk:
    path: str
    start_line: int
    lines: list[str]
    tf: Counter[str]
    length: int


class BM25Index:
    """BM25 (k1, b) over windows of `chunk_lines` lines. Files are re-chunked only when their
    (mtime, size) changes, so searching after edits stays cheap."""

    def __init__(
        self,
        workspace: Path,
        chunk_lines: int = 30,
        k1: float = 1.2,
        b: float = 0.75,
        max_file_bytes: int = 1 << 20,
    ) -> None:
        self.workspace = Path(os.path.realpath(workspace))
        self.chunk_lines, self.k1, self.b, self.max_file_bytes = chunk_lines, k1, b, max_file_bytes
        self._files: dict[str, tuple[tuple[int, int], list[_Chunk]]] = {}
        self._lock = threading.Lock()

    def _scan(self) -> dict[str, tuple[int, int]]:
        found: dict[str, tuple[int, int]] = {}
        stack = [self.workspace]
        while stack:
            d = stack.pop()
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for e in entries:
                if e.is_symlink():  # never follow: a symlink may point out of the workspace
                    continue
                if e.is_dir():
                    if e.name not in SKIP_DIRS:
                        stack.append(Path(e.path))
                elif e.is_file():
                    st = e.stat()
                    if st.st_size <= self.max_file_bytes:
                        found[os.path.relpath(e.path, self.workspace)] = (st.st_mtime_ns, st.st_size)
        return found

    def _chunk(self, rel: str) -> list[_Chunk]:
        try:
            data = (self.workspace / rel).read_bytes()
        except OSError:
            return []
        if b"\x00" in data[:8192]:
            return []
        lines = data.decode("utf-8", "replace").splitlines()
        path_terms = tokenize(rel)
        chunks = []
        for start in range(0, max(len(lines), 1), self.chunk_lines):
            window = lines[start : start + self.chunk_lines]
            terms = tokenize("\n".join(window)) + path_terms
            chunks.append(_Chunk(rel, start + 1, window, Counter(terms), len(terms)))
        return chunks

    def refresh(self) -> None:
        with self._lock:
            current = self._scan()
            for rel in list(self._files):
                if rel not in current:
                    del self._files[rel]
            for rel, sig in current.items():
                if rel not in self._files or self._files[rel][0] != sig:
                    self._files[rel] = (sig, self._chunk(rel))

    def search(self, query: str, k: int = 10) -> list[Hit]:
        self.refresh()
        q = list(dict.fromkeys(tokenize(query)))
        chunks = [c for _, cs in self._files.values() for c in cs]
        if not q or not chunks:
            return []
        n = len(chunks)
        avgdl = sum(c.length for c in chunks) / n or 1.0
        df = {t: sum(1 for c in chunks if t in c.tf) for t in q}
        idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in q if df[t]}
        scored = []
        for c in chunks:
            s = 0.0
            for t, w in idf.items():
                f = c.tf.get(t, 0)
                if f:
                    s += w * f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * c.length / avgdl))
            if s > 0:
                scored.append((s, c))
        scored.sort(key=lambda sc: (-sc[0], sc[1].path, sc[1].start_line))
        return [_hit(c, s, set(q)) for s, c in scored[:k]]


def _hit(c: _Chunk, score: float, q: set[str], max_lines: int = 6) -> Hit:
    # Show the lines of the window that mention a query term, so the model can jump to them.
    shown = [f"{c.start_line + i:>6}\t{ln}" for i, ln in enumerate(c.lines) if q & set(tokenize(ln))]
    snippet = "\n".join(x[:200] for x in shown[:max_lines])
    return Hit(c.path, c.start_line, c.start_line + max(len(c.lines) - 1, 0), round(score, 3), snippet)


class SearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(description="What to look for: identifiers, words from code or comments.")
    k: int = Field(8, ge=1, le=50, description="How many results.")


def search(ctx: ToolContext, args: SearchArgs) -> str:
    if not args.query.strip():
        raise ToolError("empty query")
    if ctx.retriever is None:
        ctx.retriever = BM25Index(ctx.workspace)
    hits = ctx.retriever.search(args.query, args.k)
    if not hits:
        return "no results"
    blocks = [f"{h.path}:{h.start_line}-{h.end_line} (score {h.score})\n{h.snippet}" for h in hits]
    return truncate("\n\n".join(blocks), ctx.output_chars, keep="head")


TOOLS = [
    Tool(
        "search",
        "Ranked code search over the workspace (BM25); returns files, line ranges and matching lines.",
        SearchArgs,
        search,
    )
]
