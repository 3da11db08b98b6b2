"""Score a lookup task's first assistant turn by running its call against the task's repo.

Success means the turn is one well-formed `grep` call whose pattern, run over the repo, finds the
line that defines the asked-for constant. Until the harness's protocol and episode loop land, this
is the stages' honest check: it executes the call, never string-matches the expected answer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

TOOL_CALL = re.compile(r"^\s*<tool_call>(.*?)</tool_call>\s*$", re.S)


def parse_single_call(text: str) -> dict | None:
    """The one tool call of a turn, or None when the turn is malformed or not a call."""
    m = TOOL_CALL.match(text)
    if not m:
        return None
    try:
        call = json.loads(m.group(1))
    except json.JSONDecodeError:
        return None
    if (
        not isinstance(call, dict)
        or not isinstance(call.get("name"), str)
        or not isinstance(call.get("arguments"), dict)
    ):
        return None
    return call


def grep_repo(repo: Path, pattern: str) -> list[str]:
    """`path:line:text` for every matching line, like the harness's grep tool."""
    rx = re.compile(pattern)
    hits = []
    for p in sorted(repo.rglob("*.py")):
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if rx.search(line):
                hits.append(f"{p.relative_to(repo).as_posix()}:{i}:{line}")
    return hits


def score(text: str, task: dict, repos: Path) -> dict[str, float]:
    """{'malformed': 0/1, 'success': 0/1} for one first turn."""
    call = parse_single_call(text.removesuffix("<|im_end|>"))
    if call is None:
        return {"malformed": 1.0, "success": 0.0}
    pattern = call["arguments"].get("pattern")
    if call["name"] != "grep" or not isinstance(pattern, str):
        return {"malformed": 0.0, "success": 0.0}
    try:
        hits = grep_repo(repos / task["repo"], pattern)
    except re.error:
        return {"malformed": 1.0, "success": 0.0}
    found = any(h.split(":", 2)[2].startswith(f"{task['name']} =") for h in hits) and len(hits) <= 3
    return {"malformed": 0.0, "success": float(found)}
