"""What every tool shares: the Tool record, the per-episode context, errors, output capping, and
confining model-given paths to the workspace."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from pydantic import BaseModel

from harnessrl.harness.sandbox import SANDBOX_ROOT, CommandResult, Sandbox


class ToolError(Exception):
    """An error the model caused and should read (bad path, no match, ...). Its text goes back as
    the tool response; the episode goes on."""


@dataclass(frozen=True)
class Hit:
    path: str  # relative to the workspace
    start_line: int  # 1-based, inclusive
    end_line: int
    score: float
    snippet: str


class Retriever(Protocol):
    """A search backend (search.BM25Index by default): the `search` tool asks it for the k best hits."""

    def search(self, query: str, k: int) -> list[Hit]: ...


@dataclass
class ToolContext:
    """Everything a tool may touch during one episode."""

    workspace: Path
    sandbox: Sandbox | None = None  # None: run_terminal/lint/run_tests answer with an error
    output_chars: int = 8000  # cap on every tool response
    ask_user: Callable[[str], str] | None = None  # the task's simulated user
    retriever: Retriever | None = None  # search backend; built lazily (BM25) when None
    deadline: float | None = None  # time.monotonic() at which the episode's wall clock runs out


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args: type[BaseModel]  # pydantic model of the arguments; its JSON Schema is what the model sees
    run: Callable[[ToolContext, Any], str]  # (ctx, validated args) -> response text; raises ToolError
    ends_episode: bool = False  # answer/finish


def sandbox_run(ctx: ToolContext, command: str, timeout_s: float | None) -> CommandResult:
    """Run a command in the episode's sandbox, never past the episode's deadline."""
    if ctx.sandbox is None:
        raise ToolError("this episode has no sandbox; commands cannot run")
    if ctx.deadline is not None:
        left = ctx.deadline - time.monotonic()
        if left <= 0:
            raise ToolError("the episode's time is up")
        timeout_s = left if timeout_s is None else min(timeout_s, left)
    return ctx.sandbox.run(command, timeout_s=timeout_s)


def truncate(text: str, limit: int, keep: str = "middle") -> str:
    """Cap `text` at about `limit` chars with a visible marker. keep="middle" keeps head and tail
    (a test run's summary is at the end); keep="head" keeps the start (a file's first lines)."""
    if len(text) <= limit:
        return text
    if keep == "head":
        return text[:limit] + f"\n[... truncated {len(text) - limit} chars ...]"
    half = limit // 2
    return text[:half] + f"\n[... truncated {len(text) - 2 * half} chars ...]\n" + text[len(text) - half :]


def confine(workspace: Path, path: str) -> Path:
    """Map a model-given path to a real path inside the workspace, or raise ToolError.

    Accepts relative paths and absolute paths under /workspace (what the sandbox shows the model).
    Rejects `..` components, other absolute paths, and anything whose resolved target (symlinks
    followed) lies outside the workspace. Returns the resolved path, so callers act on what was
    checked; to act on it without a race, open it through `dir_beneath`.
    """
    if "\x00" in path:
        raise ToolError("path contains a NUL byte")
    p = PurePosixPath(path.strip() or ".")
    if p.is_absolute():
        root = PurePosixPath(SANDBOX_ROOT)
        if p != root and root not in p.parents:
            raise ToolError(f"path {path!r} is outside the workspace; use a path relative to {SANDBOX_ROOT}")
        p = p.relative_to(root)
    if ".." in p.parts:
        raise ToolError(f"path {path!r} contains '..'; paths must stay inside the workspace")
    root_real = Path(os.path.realpath(workspace))
    real = Path(os.path.realpath(root_real / p))
    if real != root_real and root_real not in real.parents:
        raise ToolError(f"path {path!r} resolves outside the workspace (symlink)")
    return real


def show(workspace: Path, real: Path) -> str:
    """How a real path is shown to the model: relative to the workspace root."""
    rel = os.path.relpath(real, os.path.realpath(workspace))
    return "." if rel == "." else rel


def dir_beneath(workspace: Path, real_dir: Path, create: bool = False) -> int:
    """An O_PATH fd of `real_dir` (a path `confine` returned), opened one component at a time from
    the workspace root with O_NOFOLLOW. A sandboxed command running in parallel could swap a checked
    directory for a symlink after `confine`; this walk then fails instead of following it out. With
    `create`, missing directories are made, owned like their parent (the sandbox uid, as root)."""
    root = os.path.realpath(workspace)
    rel = os.path.relpath(real_dir, root)
    if rel == ".." or rel.startswith("../"):
        raise ToolError("path is outside the workspace")
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        for part in [] if rel == "." else rel.split(os.sep):
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    st = os.stat(fd)
                    os.chown(part, st.st_uid, st.st_gid, dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    pass
            try:
                nfd = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as e:  # ELOOP/ENOTDIR: swapped for a symlink or a file
                raise ToolError(f"cannot open directory {part!r}: {e.strerror}") from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd
