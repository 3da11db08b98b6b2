"""`harnessrl agent`: the production harness on a real repository, driven by any policy.

The same tools, sandbox, protocol, budgets and context policy as SFT data, RL rollouts and eval: by
default the harness the checkpoint was trained in (its harness.json). The agent works on a copy of
the repository (commands run sandboxed over the copy); at the end the changes it made are printed as
a unified diff, so the person decides what to apply.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from harnessrl.harness.context import SUMMARIZE_REQUEST, TokenCounter
from harnessrl.harness.episode import AssistantTurn, Policy, Trajectory, run_episode
from harnessrl.harness.sandbox import Sandbox, SandboxLimits, create_workspace
from harnessrl.harness.spec import PRODUCTION_PROMPT, HarnessSpec
from harnessrl.harness.tools import ALL_TOOLS, ToolContext, select


def production_harness(spec: HarnessSpec | None) -> HarnessSpec:
    """A checkpoint's own harness, or for one trained in none, every tool and the production prompt."""
    from harnessrl.config import Budgets

    return spec or HarnessSpec(tools=list(ALL_TOOLS), system_prompt=PRODUCTION_PROMPT, budgets=Budgets())


class Streaming:
    """Wraps a policy to print each tool result, each model turn and each compaction as the episode goes."""

    def __init__(self, policy: Policy, out: TextIO) -> None:
        self.policy, self.out, self.turns = policy, out, 0

    def show_new(self, messages: list[dict[str, Any]]) -> None:
        """What came after the policy's last turn: tool results, a summary request, a new segment."""
        last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
        if last is None:  # the first turn, or a segment that starts from a summary
            if self.turns:
                self.out.write("  ⟲ the context starts again from the summary\n")
            return
        for m in messages[last + 1 :]:
            if m["role"] == "user" and m["content"] == SUMMARIZE_REQUEST:
                self.out.write("  ⟲ context full: the model summarizes\n")
            elif m["role"] in ("tool", "user"):
                body = m["content"] if len(m["content"]) < 1200 else m["content"][:1200] + " [...]"
                self.out.write(f"  ⤷ {body}\n")

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int) -> AssistantTurn:
        self.show_new(messages)
        turn = self.policy(messages, tools, max_tokens)
        self.turns += 1
        self.out.write(f"● {turn.text}\n")
        self.out.flush()
        return turn


def run_agent(
    policy: Policy,
    repo: Path,
    instruction: str,
    harness: HarnessSpec,
    out: TextIO | None = None,
    answer_user: bool = True,
    count_tokens: TokenCounter | None = None,
) -> tuple[Trajectory, str]:
    """One episode on a copy of `repo` in `harness`; returns the trajectory and the diff of what changed."""
    if not repo.is_dir():
        raise FileNotFoundError(f"{repo}: no such directory")
    with tempfile.TemporaryDirectory(prefix="harnessrl-agent-") as tmp:
        ws = create_workspace(repo, Path(tmp) / "ws", method="copy")
        ask = (lambda q: input(f"? {q}\n> ")) if answer_user and sys.stdin.isatty() else None
        ctx = ToolContext(workspace=ws, sandbox=Sandbox(ws, SandboxLimits(wall_s=120)), ask_user=ask)
        streaming = Streaming(policy, out or sys.stdout)  # looked up now: the caller may have redirected it
        traj = run_episode(streaming, instruction, select(harness.tools), ctx, budgets=harness.budgets,
                           system_prompt=harness.system_prompt, count_tokens=count_tokens, fmt=harness.fmt)  # fmt: skip
        streaming.show_new(traj.messages)  # the results of the last turn
        diff = subprocess.run(["diff", "-ruN", str(repo), str(ws)], capture_output=True, text=True).stdout
        shutil.rmtree(ws, ignore_errors=True)
    return traj, diff.replace(str(ws), "b").replace(str(repo), "a")
