"""The harness a model works in: its tools, its system prompt, its budgets and context policy.

Every training stage saves the harness it trained in beside its checkpoint (`harness.json`), and
`harnessrl agent` presents that same harness by default: production is the training harness. A
checkpoint with none (the base model, CPT, a foreign model) gets the full production harness.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from harnessrl.config import Budgets

HARNESS_FILE = "harness.json"
SYSTEM_PROMPT = "You are a coding agent."
# For models trained in no particular harness: every tool, and a prompt that says how calls run.
PRODUCTION_PROMPT = (
    "You are a coding agent working in a repository. Use the tools to inspect and change it, run the "
    "tests, then answer briefly. Calls in one turn run in parallel: make independent calls together."
)


def system_prompt(tools: list[str]) -> str:
    """The training harness's system prompt. Short on purpose: a tiny model reads it in every
    conversation, and each word of prose costs it two tokens. It names the tools; real models also
    get their schemas through their chat template."""
    return f"{SYSTEM_PROMPT} Tools: {', '.join(tools)}."


class HarnessSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tools: list[str]
    system_prompt: str
    budgets: Budgets

    @classmethod
    def training(cls, tools: list[str], budgets: Budgets) -> HarnessSpec:
        return cls(tools=tools, system_prompt=system_prompt(tools), budgets=budgets)


class HarnessFileError(ValueError):
    """A harness.json that is unreadable or does not validate; the message names the file and field."""


def save_harness(spec: HarnessSpec, folder: Path) -> None:
    (Path(folder) / HARNESS_FILE).write_text(spec.model_dump_json(indent=2) + "\n")


def load_harness(path: Path | str) -> HarnessSpec | None:
    """The harness of a checkpoint folder (or a harness.json itself); None when it records none."""
    path = Path(path)
    file = path / HARNESS_FILE if path.is_dir() else path
    if not file.is_file():
        return None
    try:
        return HarnessSpec.model_validate(json.loads(file.read_text()))
    except json.JSONDecodeError as e:
        raise HarnessFileError(f"{file}: not JSON ({e.msg} at line {e.lineno})") from None
    except ValidationError as e:
        err = e.errors()[0]
        raise HarnessFileError(f"{file}: field {'.'.join(map(str, err['loc']))!r}: {err['msg']}") from None


def tools_of(task_tools: list[list[str]]) -> list[str]:
    """The tools of several tasks together, in order of first appearance: what a stage trained with."""
    return list(dict.fromkeys(t for tools in task_tools for t in tools))
