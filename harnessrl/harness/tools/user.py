"""Tools that talk to the user: ask_user (a task-provided simulated user answers), and the two ways
to end an episode, answer (a question's answer) and finish (a coding task is done)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from harnessrl.harness.tools.base import Tool, ToolContext, ToolError, truncate


class AskUserArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str = Field(description="A question for the user, when the task is ambiguous.")


def ask_user(ctx: ToolContext, args: AskUserArgs) -> str:
    # The episode counts these calls: a reward can charge for questions. Without a simulated user the
    # question goes to the real one, as in production: the episode ends there, unsolved (stop "asked").
    if not args.question.strip():
        raise ToolError("empty question")
    if ctx.ask_user is None:
        return "question sent to the user; the episode ends until they reply"
    return truncate(str(ctx.ask_user(args.question)), ctx.output_chars)


class AnswerArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(description="Your final answer.")


def answer(ctx: ToolContext, args: AnswerArgs) -> str:
    return "answer recorded; the episode ends"


class FinishArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    summary: str = Field(description="What you changed and why.")


def finish(ctx: ToolContext, args: FinishArgs) -> str:
    return "finished; the episode ends"


TOOLS = [
    Tool("ask_user", "Ask the user a clarifying question and get their reply.", AskUserArgs, ask_user),
    Tool("answer", "Give your final answer; ends the episode.", AnswerArgs, answer, ends_episode=True),
    Tool(
        "finish",
        "Declare the task done, with a summary; ends the episode.",
        FinishArgs,
        finish,
        ends_episode=True,
    ),
]
