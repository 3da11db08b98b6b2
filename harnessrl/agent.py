"""`harnessrl agent`: the production harness on a real repository, driven by any policy.

The same tools, sandbox, protocol and budgets as SFT data, RL rollouts and eval. The agent works on
a copy of the repository (commands run sandboxed over the copy); at the end the changes it made are
printed as a unified diff, so the person decides what to apply.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from harnessrl.harness.episode import AssistantTurn, Budgets, Policy, Trajectory, run_episode
from harnessrl.harness.sandbox import Sandbox, SandboxLimits, create_workspace
from harnessrl.harness.tools import ALL_TOOLS, ToolContext

SYSTEM_PROMPT = (
    "You are a coding agent working in a repository. Use the tools to inspect and change it, run the "
    "tests, then answer briefly. Calls in one turn run in parallel: make independent calls together."
)


class Streaming:
    """Wraps a policy to print each tool result and each model turn as the episode goes."""

    def __init__(self, policy: Policy, out: TextIO) -> None:
        self.policy, self.out, self.seen = policy, out, 0

    def show_new(self, messages: list[dict[str, Any]]) -> None:
        for m in messages[self.seen :]:
            if m["role"] == "tool":
                body = m["content"] if len(m["content"]) < 1200 else m["content"][:1200] + " [...]"
                self.out.write(f"  ⤷ {body}\n")
        self.seen = len(messages)

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int) -> AssistantTurn:
        self.show_new(messages)
        turn = self.policy(messages, tools, max_tokens)
        self.out.write(f"● {turn.text}\n")
        self.out.flush()
        self.seen += 1  # the assistant message the loop appends next
        return turn


def run_agent(
    policy: Policy, repo: Path, instruction: str, budgets: Budgets, out: TextIO = sys.stdout, answer_user: bool = True
) -> tuple[Trajectory, str]:
    """One episode on a copy of `repo`; returns the trajectory and the diff of what changed."""
    if not repo.is_dir():
        raise FileNotFoundError(f"{repo}: no such directory")
    with tempfile.TemporaryDirectory(prefix="harnessrl-agent-") as tmp:
        ws = create_workspace(repo, Path(tmp) / "ws", method="copy")
        ask = (lambda q: input(f"? {q}\n> ")) if answer_user and sys.stdin.isatty() else None
        ctx = ToolContext(workspace=ws, sandbox=Sandbox(ws, SandboxLimits(wall_s=120)), ask_user=ask)
        streaming = Streaming(policy, out)
        traj = run_episode(streaming, instruction, ALL_TOOLS, ctx, budgets=budgets, system_prompt=SYSTEM_PROMPT)
        streaming.show_new(traj.messages)
        diff = subprocess.run(["diff", "-ruN", str(repo), str(ws)], capture_output=True, text=True).stdout
        shutil.rmtree(ws, ignore_errors=True)
    return traj, diff.replace(str(ws), "b").replace(str(repo), "a")
