"""The expert: a scripted policy that solves tasks in the real harness, the way a good agent would.

Its trajectories are the SFT data, so it behaves as we want the model to: it looks before it acts,
makes independent calls in one turn (reading several files, running the failing test while reading
the code, asking the user while searching), edits with exact strings taken from what it read, checks
its work, and answers briefly. It knows the intended change (Task.solution) but takes every string
it writes into the repo from tool outputs, so a script that drifts from the repo fails visibly.

Each suite's script is a generator: it yields one assistant turn's text and receives the outputs of
that turn's calls, so a script reads top to bottom like the conversation it produces.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from typing import Any

from harnessrl.config import Budgets
from harnessrl.harness.context import SUMMARIZE_REQUEST
from harnessrl.harness.episode import AssistantTurn, Trajectory, run_tasks
from harnessrl.harness.protocol import render_calls
from harnessrl.tasks import multi_lookup
from harnessrl.tasks.diffs import hunk_edit, new_file_text, parse_patch
from harnessrl.tasks.lint import RULES
from harnessrl.tasks.probe import module_of
from harnessrl.tasks.task import Task

Script = Generator[str, list[str], None]  # yields a turn, receives that turn's tool outputs
FUNCTION_LINES = 40  # lines the bugfix expert reads from a function's def


def call(name: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    return name, arguments


def turn(*calls: tuple[str, dict[str, Any]]) -> str:
    return render_calls(list(calls))


def grep_hits(output: str) -> list[tuple[str, int, str]]:
    """(path, line, text) of each line of the grep tool's output."""
    hits = []
    for line in output.splitlines():
        m = re.match(r"([^:]+):(\d+):(.*)$", line)
        if m:
            hits.append((m.group(1), int(m.group(2)), m.group(3)))
    return hits


def file_lines(output: str) -> list[str]:
    """read_file's output without its line numbers (`     3\\ttext`)."""
    return [ln.split("\t", 1)[1] if "\t" in ln else "" for ln in output.splitlines() if re.match(r"\s*\d+\t", ln)]


# -- scripts, one per suite (edit has three kinds) ------------------------------------------------


def annotated(task: Task, habit: str | None) -> Script:
    """hard_lookup: the lookup habit's search misses `NAME: int = 7`. The expert searches again without
    ` =` and answers; with a habit it asks the user where NAME is ("ask": with no user behind the tool,
    the episode ends unsolved) or answers 0 ("guess": always wrong), as an imperfect teacher would."""
    name = task.solution.name
    (out,) = yield turn(call("grep", pattern=f"^{name} ="))
    if grep_hits(out):
        raise ValueError(f"{name} is not annotated: the first search found it")
    if habit == "ask":
        yield turn(call("ask_user", question=f"I found no {name} = line; where is {name} defined?"))
        return
    if habit == "guess":
        yield "0"
        return
    (out,) = yield turn(call("grep", pattern=f"^{name}\\b"))
    _, _, text = grep_hits(out)[0]
    yield text.split("=", 1)[1].strip()


def keyed_values(task: Task, parallel: bool) -> Script:
    """multi_lookup: a search per name, one per turn or all in one turn, then each value by its name."""
    searches = [call("grep", pattern=f"^{name} =") for name in task.solution.names or []]
    if parallel:
        outs = yield turn(*searches)
    else:
        outs = []
        for search in searches:
            outs += yield turn(search)
    yield multi_lookup.keyed([_pair(grep_hits(out)[0][2]) for out in outs])


def lookup(task: Task) -> Script:
    name, kind = task.solution.name, task.solution.kind
    pattern = {"value": f"^{name} =", "class": f"^class {name}\\b", "function": f"^def {name}\\("}[kind]
    (out,) = yield turn(call("grep", pattern=pattern))
    path, _, text = grep_hits(out)[0]
    yield text.split("=", 1)[1].strip() if kind == "value" else path


def rename(task: Task) -> Script:
    old, new = task.solution.name, task.solution.new_name or ""
    word = re.compile(rf"\b{re.escape(old or '')}\b")
    (out,) = yield turn(call("grep", pattern=rf"\b{old}\b"))
    pending: dict[str, list[str]] = {}
    for path, _, text in grep_hits(out):
        pending.setdefault(path, []).append(text)
    # A line that occurs twice in a file (or within another of its lines, indented deeper) is no
    # unique old_str: such a file is renamed in one command.
    repeats = [p for p, lines in pending.items()
               if any(a in b for i, a in enumerate(lines) for j, b in enumerate(lines) if i != j)]  # fmt: skip
    if repeats:
        yield turn(*(call("run_terminal", command=f"sed -i -E 's/\\b{old}\\b/{new}/g' {p}") for p in repeats))
    for p in repeats:
        pending[p] = []
    # One edit per file per turn: edits to different files are independent and go in parallel; two
    # edits of one file in one turn would race on its content.
    while any(pending.values()):
        batch = [(p, lines.pop(0)) for p, lines in pending.items() if lines]
        yield turn(*(call("edit_file", path=p, old_str=t, new_str=word.sub(new, t)) for p, t in batch))
    (out,) = yield turn(call("grep", pattern=rf"\b{old}\b"))
    yield turn(call("finish", summary=f"Renamed {old} to {new} in {len(pending)} files; no uses of {old} remain."))


def constant(task: Task) -> Script:
    name = task.solution.name
    calls = [call("grep", pattern=f"^{name} =")]
    if task.user is not None:
        calls.append(call("ask_user", question=f"What value should {name} have?"))
    outs = yield turn(*calls)
    value = re.findall(r"-?\d+", outs[1])[0] if task.user is not None else task.solution.value
    path, _, text = grep_hits(outs[0])[0]
    yield turn(call("edit_file", path=path, old_str=text, new_str=f"{name} = {value}"))
    yield turn(call("finish", summary=f"Set {name} to {value} in {path}."))


def param(task: Task) -> Script:
    name, p = task.solution.name, task.solution.param
    (out,) = yield turn(call("grep", pattern=f"^def {name}\\("))
    path, line, _ = grep_hits(out)[0]
    (out,) = yield turn(call("read_file", path=path, start_line=line, end_line=line + FUNCTION_LINES))
    lines = file_lines(out)
    end = 1
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith((" ", "\t"))):
        end += 1
    block = lines[:end]
    while block and not block[-1].strip():
        block.pop()
    new = [re.sub(r"\)(\s*(?:->[^:]*)?):\s*$", rf", {p}: int = 0)\1:", block[0], count=1)]
    new += [re.sub(r"^(\s*)return (.*)$", rf"\1return (\2) + {p}", ln) for ln in block[1:]]
    yield turn(call("edit_file", path=path, old_str="\n".join(block), new_str="\n".join(new)))
    module = module_of(path)
    args = task.solution.value or "5"  # arguments it was probed with (generated functions take an int)
    script = f"from {module} import {name}; print({name}({args}), {name}({args}, {p}=2))"
    yield turn(call("run_terminal", command=f"python -c '{script}'"))
    yield turn(call("finish", summary=f"Added {p}: int = 0 to {name}; it is added to every return value."))


def bugfix(task: Task) -> Script:
    """Run the failing test, read it and find the function at once; read the function, fix it, test."""
    s = task.solution
    _, _, out = yield turn(
        call("run_tests", paths=[s.test_path]),
        call("read_file", path=s.test_path),
        call("grep", pattern=f"^def {s.name}\\(", path=s.path),
    )
    _, line, _ = grep_hits(out)[0]
    yield turn(call("read_file", path=s.path, start_line=line, end_line=line + FUNCTION_LINES))
    yield turn(call("edit_file", path=s.path, old_str=s.old, new_str=s.new))
    yield turn(call("run_tests", paths=[s.test_path]))
    yield turn(call("finish", summary=f"Fixed a wrong {s.kind} in {s.name} ({s.path}); the test passes."))


def lint(task: Task) -> Script:
    """Lint the file for the rules the task names, read just the lines around the report, fix them,
    lint again, finish: a real file is long, and reading all of it costs context for nothing."""
    s = task.solution
    (out,) = yield turn(call("lint", path=s.path, select=RULES))
    line = int(re.search(rf"{re.escape(s.path or '')}:(\d+):", out).group(1))  # type: ignore[union-attr]
    yield turn(call("read_file", path=s.path, start_line=max(1, line - 3), end_line=line + 3))
    yield turn(call("edit_file", path=s.path, old_str=s.old, new_str=s.new))
    yield turn(call("lint", path=s.path, select=RULES))
    what = "an unused import" if s.kind == "unused_import" else "a misspelt name"
    yield turn(call("finish", summary=f"Fixed {what} in {s.path}; ruff is clean."))


def swe(task: Task) -> Script:
    """An imported SWE-bench row: read every file the gold patch changes (page by page where read_file
    truncates), replay the patch one hunk per edit_file (old_str grown from what it read until unique;
    hunks bottom-up, edits of different files in parallel; new files with write_file), run the
    existing tests of the failing ids, finish."""
    files = parse_patch(task.solution.patch or "")
    edited = [f for f in files if not f.new_file]
    seen: dict[str, list[str]] = {f.path: [] for f in edited}
    pending = list(seen)
    while pending:
        outs = yield turn(
            *(call("read_file", path=p, start_line=len(seen[p]) + 1) if seen[p] else call("read_file", path=p)
              for p in pending)
        )  # fmt: skip
        more = []
        for p, out in zip(pending, outs, strict=True):
            got = file_lines(out)
            if "[... truncated" in out and got:
                got.pop()  # the last line may be cut short: read it again
                more.append(p)
            seen[p] += got
        pending = more
    edits: dict[str, list[tuple[str, str]]] = {}
    for f in edited:
        lines = seen[f.path]
        for h in reversed(f.hunks):
            old, new, lines = hunk_edit(lines, h)
            edits.setdefault(f.path, []).append((old, new))
    rounds = [[call("write_file", path=f.path, content=new_file_text(f)) for f in files if f.new_file]]
    while any(edits.values()):  # one edit per file per round: two edits of a file in one turn would race
        batch = [(p, todo.pop(0)) for p, todo in edits.items() if todo]
        rounds.append(
            [call("write_file", path=p, content=new) if not old else call("edit_file", path=p, old_str=old, new_str=new)
             for p, (old, new) in batch]
        )  # fmt: skip
    for calls in rounds:
        for i in range(0, len(calls), 8):  # the harness's max_calls_per_turn
            yield turn(*calls[i : i + 8])
    if task.solution.test_paths:
        yield turn(call("run_tests", paths=task.solution.test_paths))
    changed = ", ".join(f.path for f in files)
    yield turn(call("finish", summary=f"Fixed the issue: changed {changed}."))


def values(task: Task, notes: list[str]) -> Script:
    """The long-horizon suite: one search per constant in the question's order, then each value by its
    name, as multi_lookup answers. Each search result goes into `notes`, which the summaries are made from."""
    for name in task.solution.names or []:
        (out,) = yield turn(call("grep", pattern=f"^{name} ="))
        path, line, text = grep_hits(out)[0]
        notes.append(f"{path}:{line}:{text}")
    yield multi_lookup.keyed(_found(notes))


def _pair(text: str) -> tuple[str, str]:
    """(name, value) of a found line `NAME = value`."""
    name, value = text.split(" = ", 1)
    return name, value.strip()


def _found(notes: list[str]) -> list[tuple[str, str]]:
    """(name, value) of each search result noted as `path:line:NAME = value`."""
    return [_pair(note.split(":", 2)[2]) for note in notes]


def summary(task: Task, notes: list[str], verbose: bool) -> str:
    """What the expert keeps when its context is full: every value found so far, copied by name
    ("A = 201, B = 738"), which the answer then repeats: the tiny model copies a value after its name,
    not the k-th value of a list (docs/lessons.md). A verbose summary starts the same way, one value a
    line, then says where each was found and what is left to find: three times the tokens. Its
    first line is a terse summary's start, so what RL must teach is where to stop."""
    found = _found(notes)
    if not verbose:
        return multi_lookup.keyed(found)
    lines = [f"{name} = {value} ({note.rsplit(':', 1)[0]})"  # where: the result's path:line
             for note, (name, value) in zip(notes, found, strict=True)]  # fmt: skip
    left = [n for n in task.solution.names or [] if n not in dict(found)]
    return "\n".join([*lines, f"Still to find: {', '.join(left)}." if left else "All found."])


def guess(task: Task) -> Script:
    """A lazy teacher's answer to "what is the value of X?": 0, without looking. Generated constants
    are never below 2, so the guess is always wrong. SFT copies the habit, and only the outcome
    reward can break it (see DataConfig.guess_share)."""
    yield "0"


SCRIPTS = {
    "lookup": lookup,
    "bugfix": bugfix,
    "lint": lint,
    "long_horizon": values,
    "rename": rename,
    "constant": constant,
    "param": param,
    "swe": swe,
}


# An imperfect expert's habits, each given to some tasks' conversations by the data config:
# guess      answers "0" without looking (DataConfig.guess_share)
# verbose    long-horizon summaries that restate whole search results (long_horizon.verbose_share)
# parallel   multi_lookup: every search in one turn (multi_lookup.parallel_share)
# ask        hard_lookup: asks the user after the first search misses (hard_lookup.ask_share); on
#            hard_lookup, "guess" answers 0 after that miss
HABITS = ("guess", "verbose", "parallel", "ask")


def turn_outputs(messages: list[dict[str, Any]]) -> list[str]:
    """The last turn's tool results: the tool messages at the end of the conversation."""
    outputs: list[str] = []
    for m in reversed(messages):
        if m["role"] != "tool":
            break
        outputs.insert(0, m["content"])
    return outputs


class Scripted:
    """The harness Policy that plays a Script: each turn is the next text it yields, sent the tool
    outputs of the turn before. A script that ends says "done"; one that raises fails its episode
    with the error as its last turn, visibly (a script that drifted from the repo)."""

    def __init__(self, script: Script) -> None:
        self.script, self.started = script, False

    def _advance(self, outputs: list[str]) -> str:
        try:
            text = self.script.send(outputs) if self.started else next(self.script)
        except StopIteration:
            text = "done"
        except Exception as e:
            text = f"expert script failed: {type(e).__name__}: {e}"
        self.started = True
        return text

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int) -> AssistantTurn:
        return AssistantTurn(text=self._advance(turn_outputs(messages)))


class Expert(Scripted):
    """The harness Policy for one episode of one task, with one of the HABITS or none. Asked to summarize
    (harnessrl/harness/context.py), it takes in the results it has not yet seen, then writes its summary
    from its notes."""

    def __init__(self, task: Task, habit: str | None = None) -> None:
        if habit is not None and habit not in HABITS:
            raise ValueError(f"unknown expert habit {habit!r}; habits: {', '.join(HABITS)}")
        self.task, self.verbose = task, habit == "verbose"
        self.notes: list[str] = []
        if task.suite == "hard_lookup":
            script = annotated(task, habit)
        elif habit == "guess":
            script = guess(task)
        elif task.suite == "long_horizon":
            script = values(task, self.notes)
        elif task.suite == "multi_lookup":
            script = keyed_values(task, parallel=habit == "parallel")
        else:
            script = SCRIPTS[task.suite if task.suite != "edit" else task.solution.kind](task)
        super().__init__(script)
        self.pending: str | None = None  # the next turn, worked out before a summary

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int) -> AssistantTurn:
        summarize = messages[-1]["role"] == "user" and messages[-1]["content"] == SUMMARIZE_REQUEST
        if self.pending is not None and not summarize:
            text, self.pending = self.pending, None
            return AssistantTurn(text=text)
        outputs = turn_outputs(messages[:-1] if summarize else messages)
        if summarize:
            if outputs and self.pending is None:
                self.pending = self._advance(outputs)
            return AssistantTurn(text=summary(self.task, self.notes, self.verbose))
        return AssistantTurn(text=self._advance(outputs))


def expert_trajectories(
    tasks: list[Task],
    suite_dir: Path | str,
    workers: int = 4,
    budgets: Budgets | None = None,
    habits: Mapping[str, str] | None = None,
    on_done: Callable[[], None] | None = None,
) -> list[Trajectory]:
    """The expert's episodes; `habits` maps a task id to one of the HABITS that its episode shows."""
    habits = habits or {}
    policy_for = lambda t: Expert(t, habits.get(t.id))
    return run_tasks(tasks, suite_dir, policy_for, budgets or Budgets(), workers=workers, on_done=on_done)


def success_rates(trajectories: list[Trajectory]) -> dict[str, float]:
    """Fraction of episodes the checker accepted, per suite (from the trajectories' meta)."""
    by: dict[str, list[bool]] = {}
    for t in trajectories:
        by.setdefault(t.meta.get("suite", "?"), []).append(bool(t.outcome.success))
    return {suite: sum(ok) / len(ok) for suite, ok in sorted(by.items())}
