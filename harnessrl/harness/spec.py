"""The harness a model works in: its tools, its system prompt, its budgets and context policy.

Every training stage saves the harness it trained in beside its checkpoint (`harness.json`), and
`harnessrl agent` presents that same harness by default: production is the training harness. A
checkpoint with none (the base model, CPT, a foreign model) gets the full production harness.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from harnessrl.config import Budgets
from harnessrl.harness import formats

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


def tools_named(prompt: str) -> list[str] | None:
    """The tools a training system prompt names (system_prompt's inverse), or None for another prompt."""
    head = f"{SYSTEM_PROMPT} Tools: "
    if not (prompt.startswith(head) and prompt.endswith(".")):
        return None
    return prompt[len(head) : -1].split(", ")


class HarnessSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tools: list[str]
    system_prompt: str
    budgets: Budgets
    # How the model writes its calls (harnessrl/harness/formats/): its chat template's format.
    tool_format: str = "hermes"

    @field_validator("tool_format")
    @classmethod
    def _known_format(cls, v: str) -> str:
        formats.load(v)  # a ValueError naming the known formats
        return v

    @property
    def fmt(self) -> ModuleType:
        return formats.load(self.tool_format)

    @classmethod
    def training(cls, tools: list[str], budgets: Budgets) -> HarnessSpec:
        return cls(tools=tools, system_prompt=system_prompt(tools), budgets=budgets)


class HarnessFileError(ValueError):
    """A harness.json that is unreadable or does not validate; the message names the file and field."""


def save_harness(spec: HarnessSpec, folder: Path) -> None:
    # A harness.json without tool_format has always meant Hermes, so Hermes is left out: the files
    # written before formats existed and those written now read and hash the same.
    exclude = {"tool_format"} if spec.tool_format == "hermes" else None
    (Path(folder) / HARNESS_FILE).write_text(spec.model_dump_json(indent=2, exclude=exclude) + "\n")


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
