"""Unified diffs (git's format, as SWE-bench rows carry them): parsed into files and hunks, and a hunk
turned into one edit_file call's (old_str, new_str).

Only what the harness's tools can replay is supported: edits of text files and new text files.
Deletions, renames, copies and binary patches raise UnsupportedPatch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """The text is not a unified diff this parser understands."""


class UnsupportedPatch(PatchError):
    """A well-formed diff that the harness's edit tools cannot replay (delete, rename, binary)."""


@dataclass
class Hunk:
    old_start: int
    old_len: int
    old: list[str] = field(default_factory=list)  # context and removed lines, in order
    new: list[str] = field(default_factory=list)  # context and added lines, in order
    old_eof_newline: bool = True  # False: "\ No newline at end of file" follows the old side's last line
    new_eof_newline: bool = True


@dataclass
class FilePatch:
    path: str
    new_file: bool = False
    deleted: bool = False
    hunks: list[Hunk] = field(default_factory=list)


def _strip(name: str) -> str:
    name = name.split("\t", 1)[0].strip()
    if name.startswith('"'):
        raise UnsupportedPatch(f"quoted path {name} (special characters)")
    return name[2:] if name.startswith(("a/", "b/")) else name


def parse_patch(text: str) -> list[FilePatch]:
    """The files of a unified diff, each with its hunks; raises PatchError / UnsupportedPatch."""
    lines = text.split("\n")
    files: list[FilePatch] = []
    cur: FilePatch | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            cur = FilePatch(path="")
            m = re.match(r"diff --git a/(\S+) b/(\S+)$", line)
            if m:
                cur.path = m.group(2)
            files.append(cur)
        elif line.startswith(("rename from", "copy from", "similarity index")):
            raise UnsupportedPatch(f"{line.split(' ')[0]} of {cur.path if cur else '?'} (renames and copies)")
        elif line.startswith(("Binary files", "GIT binary patch")):
            raise UnsupportedPatch(f"binary patch of {cur.path if cur else '?'}")
        elif line.startswith("new file mode") and cur is not None:
            cur.new_file = True
        elif line.startswith("deleted file mode") and cur is not None:
            cur.deleted = True
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = lines[i][4:], lines[i + 1][4:]
            if cur is None or cur.hunks:
                cur = FilePatch(path="")
                files.append(cur)
            cur.new_file = cur.new_file or old.startswith("/dev/null")
            cur.deleted = cur.deleted or new.startswith("/dev/null")
            cur.path = _strip(old if cur.deleted else new)
            i += 1
        elif line.startswith("@@"):
            if cur is None or not cur.path:
                raise PatchError(f"line {i + 1}: hunk before any file header")
            i = _hunk(lines, i, cur)
            continue
        i += 1
    if not files:
        raise PatchError("no file in the diff")
    for f in files:
        if not f.path:
            raise PatchError("a file header without a path")
        if f.deleted:
            raise UnsupportedPatch(f"deletes {f.path} (the harness has no delete tool)")
    return files


def _hunk(lines: list[str], i: int, cur: FilePatch) -> int:
    m = _HUNK.match(lines[i])
    if not m:
        raise PatchError(f"line {i + 1}: bad hunk header {lines[i]!r}")
    old_len = int(m.group(2)) if m.group(2) is not None else 1
    new_len = int(m.group(4)) if m.group(4) is not None else 1
    h = Hunk(old_start=int(m.group(1)), old_len=old_len)
    i += 1
    left_old, left_new = old_len, new_len
    last = ""
    while i < len(lines) and (left_old > 0 or left_new > 0 or lines[i].startswith("\\")):
        line = lines[i]
        tag, body = line[:1], line[1:]
        if tag == "\\":  # "\ No newline at end of file": about the line before
            if last in " -":
                h.old_eof_newline = False
            if last in " +":
                h.new_eof_newline = False
        elif tag in (" ", "") and left_old > 0 and left_new > 0:  # "": an empty context line, its space stripped
            h.old.append(body)
            h.new.append(body)
            left_old, left_new = left_old - 1, left_new - 1
        elif tag == "-" and left_old > 0:
            h.old.append(body)
            left_old -= 1
        elif tag == "+" and left_new > 0:
            h.new.append(body)
            left_new -= 1
        else:
            raise PatchError(f"line {i + 1}: hunk at -{h.old_start} is shorter than its header says")
        last = tag if tag != "\\" else last
        i += 1
    if left_old or left_new:
        raise PatchError(f"hunk at -{h.old_start} of {cur.path} is cut off")
    cur.hunks.append(h)
    return i


def new_file_text(f: FilePatch) -> str:
    """The whole content of a file the patch creates."""
    lines = [ln for h in f.hunks for ln in h.new]
    eof = all(h.new_eof_newline for h in f.hunks)
    return "\n".join(lines) + ("\n" if lines and eof else "")


def hunk_edit(lines: list[str], h: Hunk) -> tuple[str, str, list[str]]:
    """(old_str, new_str, the file's lines after the edit) for one hunk applied to a file shown as
    `lines` (its text without line endings). old_str is the hunk's context and removed lines, grown by
    whole lines of the file around it until it occurs exactly once, as edit_file requires. Hunks of a
    file are applied bottom-up, so each one's line numbers still hold."""
    start = h.old_start - 1 if h.old_len else h.old_start
    end = start + len(h.old)
    if lines[start:end] != h.old:
        raise PatchError(f"the hunk at line {h.old_start} does not match the file")
    text = "\n".join(lines) + "\n"
    lo, hi = start, end
    while True:
        block = "\n".join(lines[lo:hi])
        if (block and text.count(block) == 1) or (lo == 0 and hi == len(lines)):
            break
        lo, hi = max(lo - 1, 0), min(hi + 1, len(lines))
    after = lines[lo:start] + h.new + lines[end:hi]
    old_str, new_str = block, "\n".join(after)
    if h.old_eof_newline and not h.new_eof_newline:  # the edit reaches the end: take its newline away
        old_str += "\n"
    elif not h.old_eof_newline and h.new_eof_newline:
        new_str += "\n"
    return old_str, new_str, lines[:start] + h.new + lines[end:]
