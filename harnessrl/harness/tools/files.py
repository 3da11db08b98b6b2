"""File tools: list_dir, read_file, grep, edit_file, write_file. Every path goes through `confine`;
writes go through `replace_file` so a hardlinked snapshot is never written in place."""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harnessrl.harness.sandbox import SANDBOX_ROOT, replace_file
from harnessrl.harness.tools.base import (
    Tool,
    ToolContext,
    ToolError,
    confine,
    dir_beneath,
    sandbox_run,
    show,
    truncate,
)

SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".venv", "node_modules"}
MAX_FILE_BYTES = 8 << 20  # refuse to read bigger files whole; the model should grep them


def _read_text(workspace: Path, real: Path) -> str:
    # Opened relative to a race-free fd of its directory, O_NOFOLLOW (no symlink swapped in after
    # `confine`), O_NONBLOCK (a FIFO planted by a command must not hang the harness).
    if real == Path(os.path.realpath(workspace)):
        raise ToolError("is a directory; use list_dir")
    dfd = dir_beneath(workspace, real.parent)
    try:
        fd = os.open(real.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    except FileNotFoundError:
        raise ToolError("file not found") from None
    except OSError as e:  # ELOOP from O_NOFOLLOW, EACCES, ...
        raise ToolError(f"cannot open: {e.strerror}") from None
    finally:
        os.close(dfd)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ToolError("is a directory; use list_dir" if stat.S_ISDIR(mode) else "not a regular file")
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"file is larger than {MAX_FILE_BYTES} bytes; use grep to find what you need")
    if b"\x00" in data[:8192]:
        raise ToolError("binary file")
    return data.decode("utf-8", "replace")


# -- list_dir ----------------------------------------------------------------------------------


class ListDirArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(".", description="Directory, relative to the workspace root.")
    depth: int = Field(1, ge=1, le=4, description="How many levels to list.")


def list_dir(ctx: ToolContext, args: ListDirArgs) -> str:
    real = confine(ctx.workspace, args.path)
    if not real.is_dir():
        raise ToolError(f"{args.path!r} is not a directory")
    lines: list[str] = []

    def walk(d: Path, level: int) -> None:
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as e:
            lines.append(f"{'  ' * level}[cannot list: {e.strerror}]")
            return
        for e in entries:
            if e.name in SKIP_DIRS:
                continue
            if e.is_symlink():
                lines.append(f"{'  ' * level}{e.name} -> {os.readlink(e.path)}")
            elif e.is_dir():
                lines.append(f"{'  ' * level}{e.name}/")
                if level + 1 < args.depth:
                    walk(Path(e.path), level + 1)
            else:
                lines.append(f"{'  ' * level}{e.name}")

    walk(real, 0)
    return "\n".join(lines) if lines else "(empty directory)"


# -- read_file ---------------------------------------------------------------------------------


class ReadFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="File, relative to the workspace root.")
    start_line: int | None = Field(None, ge=1, description="First line to show (1-based).")
    end_line: int | None = Field(None, ge=1, description="Last line to show (inclusive).")


def read_file(ctx: ToolContext, args: ReadFileArgs) -> str:
    text = _read_text(ctx.workspace, confine(ctx.workspace, args.path))
    lines = text.splitlines()
    start = args.start_line or 1
    end = min(args.end_line or len(lines), len(lines))
    if args.end_line is not None and args.end_line < start:
        raise ToolError(f"end_line {args.end_line} is before start_line {start}")
    if lines and start > len(lines):
        raise ToolError(f"start_line {start} is past the end of the file ({len(lines)} lines)")
    # Numbered like `cat -n`, so the model can ask for ranges; edit_file takes text without numbers.
    body = "\n".join(f"{n:>6}\t{lines[n - 1]}" for n in range(start, end + 1))
    if not body:
        return "(empty file)"
    hint = "\n(use start_line/end_line to read further)"
    out = truncate(body, max(ctx.output_chars - len(hint) - 40, 0), keep="head")
    return out + hint if len(out) < len(body) else out


# -- grep --------------------------------------------------------------------------------------


class GrepArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pattern: str = Field(description="Perl-compatible regular expression.")
    path: str = Field(".", description="File or directory to search, relative to the workspace root.")
    glob: str | None = Field(None, description="Only files whose name matches this glob, e.g. '*.py'.")
    ignore_case: bool = False
    max_results: int = Field(100, ge=1, le=1000)


def grep(ctx: ToolContext, args: GrepArgs) -> str:
    # GNU grep -P inside the sandbox rather than Python's `re` in the harness: PCRE has a
    # backtracking limit and the sandbox a timeout, so a pathological pattern cannot hang a thread.
    if not args.pattern:
        raise ToolError("empty pattern")
    real = confine(ctx.workspace, args.path)
    rel = show(ctx.workspace, real)
    target = SANDBOX_ROOT if rel == "." else f"{SANDBOX_ROOT}/{rel}"
    cmd = ["grep", "-rnHIP", "--color=never"]
    cmd += [f"--exclude-dir={d}" for d in sorted(SKIP_DIRS)]
    if args.ignore_case:
        cmd.append("-i")
    if args.glob:
        cmd.append(f"--include={args.glob}")
    cmd += ["-e", args.pattern, "--", target]
    res = sandbox_run(ctx, shlex.join(cmd), timeout_s=20)
    if res.timed_out:
        raise ToolError("grep timed out; narrow the path or simplify the pattern")
    prefix = SANDBOX_ROOT + "/"
    hits = [ln.removeprefix(prefix) for ln in res.output.splitlines() if ln.startswith(prefix)]
    if res.exit_code == 1:
        return "no matches"
    if not hits:  # exit 2: a bad pattern, an unreadable file, PCRE's backtracking limit, ...
        raise ToolError(res.output.strip() or f"grep failed with exit code {res.exit_code}")
    shown = [h if len(h) <= 300 else h[:300] + " [...]" for h in hits[: args.max_results]]
    more = f"\n[{len(hits) - len(shown)} more matches not shown]" if len(hits) > len(shown) else ""
    return "\n".join(shown) + more


# -- edit_file / write_file --------------------------------------------------------------------


def _write(workspace: Path, real: Path, content: str, create_dirs: bool = False) -> None:
    dfd = dir_beneath(workspace, real.parent, create=create_dirs)
    try:
        replace_file(real, content, parent_fd=dfd)
    finally:
        os.close(dfd)


class EditFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="File, relative to the workspace root.")
    old_str: str = Field(description="Exact text to replace; must occur exactly once in the file.")
    new_str: str = Field(description="Replacement text.")


def edit_file(ctx: ToolContext, args: EditFileArgs) -> str:
    real = confine(ctx.workspace, args.path)
    if not args.old_str:
        raise ToolError("old_str is empty; use write_file to create or overwrite a file")
    text = _read_text(ctx.workspace, real)
    n = text.count(args.old_str)
    if n == 0:
        raise ToolError(f"old_str not found in {args.path} (0 matches); copy it exactly, without line numbers")
    if n > 1:
        raise ToolError(f"old_str matches {n} times in {args.path}; include more context to make it unique")
    _write(ctx.workspace, real, text.replace(args.old_str, args.new_str, 1))
    line = text[: text.index(args.old_str)].count("\n") + 1
    return f"edited {show(ctx.workspace, real)} at line {line}"


class WriteFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="File, relative to the workspace root; parent directories are created.")
    content: str = Field(description="The complete new content of the file.")


def write_file(ctx: ToolContext, args: WriteFileArgs) -> str:
    real = confine(ctx.workspace, args.path)
    if real.is_dir():
        raise ToolError(f"{args.path!r} is a directory")
    created = not real.exists()
    _write(ctx.workspace, real, args.content, create_dirs=True)
    return f"{'created' if created else 'overwrote'} {show(ctx.workspace, real)} ({len(args.content)} chars)"


TOOLS = [
    Tool("list_dir", "List a directory of the workspace.", ListDirArgs, list_dir),
    Tool("read_file", "Read a text file, with line numbers; optionally a line range.", ReadFileArgs, read_file),
    Tool("grep", "Search file contents with a regular expression; prints path:line:text.", GrepArgs, grep),
    Tool(
        "edit_file",
        "Replace one exact, unique occurrence of old_str with new_str in a file.",
        EditFileArgs,
        edit_file,
    ),
    Tool("write_file", "Create or overwrite a file with the given content.", WriteFileArgs, write_file),
]
