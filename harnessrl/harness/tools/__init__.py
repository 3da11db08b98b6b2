"""The tools a policy can call, by name. A task picks the subset it exposes: `select(names)`."""

from __future__ import annotations

from harnessrl.harness.tools import files, search, terminal, user
from harnessrl.harness.tools.base import Tool, ToolContext, ToolError, confine, truncate

ALL_TOOLS: dict[str, Tool] = {t.name: t for m in (files, search, terminal, user) for t in m.TOOLS}


def select(names: list[str] | tuple[str, ...]) -> dict[str, Tool]:
    """The named tools, in the given order (which is the order the model sees them)."""
    unknown = [n for n in names if n not in ALL_TOOLS]
    if unknown:
        raise KeyError(f"unknown tools {unknown}; known: {sorted(ALL_TOOLS)}")
    return {n: ALL_TOOLS[n] for n in names}


__all__ = ["ALL_TOOLS", "Tool", "ToolContext", "ToolError", "confine", "select", "truncate"]
