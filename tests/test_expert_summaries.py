"""The long-horizon expert's summaries, which SFT copies: a terse one keys each value by its name (the
tiny model copies a value after its name, not the k-th of a list), and a verbose one opens the same
way, so the lesson RL must teach is where to stop. The answer is keyed too, and a miscopied name fails."""

from __future__ import annotations

from harnessrl.tasks.checkers import answer_matches
from harnessrl.tasks.expert import summary
from harnessrl.tasks.task import Check, Solution, Task

TASK = Task(
    id="long_horizon/r0000/0",
    suite="long_horizon",
    split="train",
    repo="repos/train/r0000",
    instruction="What are the values of A_X, B_Y and C_Z?",
    tools=["grep", "read_file"],
    check=Check(kind="answer", answer="A_X = 1, B_Y = 22, C_Z = 333"),
    solution=Solution(kind="values", names=["A_X", "B_Y", "C_Z"]),
)
NOTES = ["pkg/a.py:3:A_X = 1", "pkg/b.py:6:B_Y = 22"]  # the two search results before the summary


def test_a_terse_summary_is_the_values_found_by_name() -> None:
    assert summary(TASK, NOTES, verbose=False) == "A_X = 1, B_Y = 22"


def test_a_verbose_summary_opens_with_the_first_value_then_says_where_and_what_is_left() -> None:
    assert summary(TASK, NOTES, verbose=True) == "A_X = 1 (pkg/a.py:3)\nB_Y = 22 (pkg/b.py:6)\nStill to find: C_Z."
    assert summary(TASK, [*NOTES, "pkg/c.py:1:C_Z = 333"], verbose=True).endswith("\nAll found.")


def test_a_keyed_answer_must_name_every_value_right() -> None:
    assert answer_matches(TASK.check.answer or "", "A_X = 1, B_Y = 22, C_Z = 333")
    assert not answer_matches(TASK.check.answer or "", "A_Y = 1, B_Y = 22, C_Z = 333")  # a miscopied name
    assert not answer_matches(TASK.check.answer or "", "A_X = 1, B_Y = 23, C_Z = 333")
