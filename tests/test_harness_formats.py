"""The harness reads each tool-call format strictly: what a format renders parses back to the same
calls, and every malformed class the harness counts has a turn that shows it, in every format."""

from __future__ import annotations

import json

import pytest

from harnessrl.harness.formats import (
    BAD_ARGUMENTS,
    CLASSES,
    FORMATS,
    TEXT_OUTSIDE,
    UNCLOSED,
    UNKNOWN_TOOL,
    UNPARSEABLE,
    load,
)
from harnessrl.harness.protocol import parse_turn, render_errors
from harnessrl.harness.tools import ALL_TOOLS

CALLS = [
    ("grep", {"pattern": "MAX_RETRIES"}),
    ("read_file", {"path": "docs/café – 日本.md"}),
    ("grep", {"pattern": 'say "hi" <b>&</b> {x}; [y]\nnext line'}),
]

# Per format, one turn of each malformed class, written as a model in that format would get it wrong.
MALFORMED = {
    "hermes": {
        UNPARSEABLE: '<tool_call>\n{"name": "grep", "arguments": {"pattern": }\n</tool_call>',
        UNKNOWN_TOOL: '<tool_call>\n{"name": "search_web", "arguments": {"q": "x"}}\n</tool_call>',
        BAD_ARGUMENTS: '<tool_call>\n{"name": "grep", "arguments": {"pattern": 3}}\n</tool_call>',
        UNCLOSED: '<tool_call>\n{"name": "grep", "arguments": {"pattern": "x"}}',
        TEXT_OUTSIDE: 'Looking.\n<tool_call>\n{"name": "grep", "arguments": {"pattern": "x"}}\n</tool_call>',
    },
    "qwen3_coder": {
        UNPARSEABLE: '<tool_call>\n{"name": "grep", "arguments": {"pattern": "x"}}\n</tool_call>',
        UNKNOWN_TOOL: "<tool_call>\n<function=search_web>\n<parameter=q>\nx\n</parameter>\n</function>\n</tool_call>",
        BAD_ARGUMENTS: "<tool_call>\n<function=grep>\n<parameter=patern>\nx\n</parameter>\n</function>\n</tool_call>",
        UNCLOSED: "<tool_call>\n<function=grep>\n<parameter=pattern>\nx\n</function>\n</tool_call>",
        TEXT_OUTSIDE: "Looking.\n<tool_call>\n<function=grep>\n<parameter=pattern>\nx\n</parameter>\n</function>\n</tool_call>",
    },
    "llama3_json": {
        UNPARSEABLE: '{"name": "grep", "parameters": {"pattern": x}}',
        UNKNOWN_TOOL: '{"name": "search_web", "parameters": {"q": "x"}}',
        BAD_ARGUMENTS: '{"name": "grep", "parameters": ["x"]}',
        UNCLOSED: '{"name": "grep", "parameters": {"pattern": "x"}',
        TEXT_OUTSIDE: 'Looking. {"name": "grep", "parameters": {"pattern": "x"}}',
    },
    "mistral": {
        UNPARSEABLE: '[TOOL_CALLS] {"name": "grep", "arguments": {"pattern": "x"}}',
        UNKNOWN_TOOL: '[TOOL_CALLS] [{"name": "search_web", "arguments": {"q": "x"}}]',
        BAD_ARGUMENTS: '[TOOL_CALLS] [{"name": "grep", "arguments": {"pattern": null}}]',
        UNCLOSED: '[TOOL_CALLS] [{"name": "grep", "arguments": {"pattern": "x"}}',
        TEXT_OUTSIDE: 'Looking. [TOOL_CALLS] [{"name": "grep", "arguments": {"pattern": "x"}}]',
    },
}


@pytest.mark.parametrize("name", list(FORMATS))
def test_what_a_format_renders_parses_back_to_the_same_calls(name: str) -> None:
    fmt = FORMATS[name]
    for calls in ([CALLS[0]], CALLS):
        turn = parse_turn(fmt.render_calls(calls), ALL_TOOLS, fmt=fmt)
        assert turn.kind == "tool_calls", turn.errors
        assert [(c.name, c.arguments) for c in turn.calls] == calls


@pytest.mark.parametrize("name", list(FORMATS))
def test_qwen3_coder_and_the_json_formats_type_arguments_alike(name: str) -> None:
    """An integer argument comes back an integer in every format: qwen3_coder writes it as text and
    reads it back by the tool's schema."""
    fmt = FORMATS[name]
    turn = parse_turn(
        fmt.render_calls([("read_file", {"path": "a.py", "start_line": 3, "end_line": 9})]), ALL_TOOLS, fmt=fmt
    )
    assert turn.kind == "tool_calls", turn.errors
    assert turn.calls[0].arguments == {"path": "a.py", "start_line": 3, "end_line": 9}


@pytest.mark.parametrize("name", list(FORMATS))
@pytest.mark.parametrize("kind", [UNPARSEABLE, UNKNOWN_TOOL, BAD_ARGUMENTS, UNCLOSED, TEXT_OUTSIDE])
def test_each_malformed_class_in_each_format(name: str, kind: str) -> None:
    fmt = FORMATS[name]
    turn = parse_turn(MALFORMED[name][kind], ALL_TOOLS, fmt=fmt)
    assert turn.kind == "malformed"
    assert turn.classes[0] == kind, (turn.classes, turn.errors)
    assert len(turn.classes) == len(turn.errors)
    # The model is told what was wrong and how this format writes a call.
    assert render_errors(turn, fmt).endswith(fmt.HINT)


@pytest.mark.parametrize("name", list(FORMATS))
def test_plain_text_is_a_final_answer_in_every_format(name: str) -> None:
    turn = parse_turn("MAX_RETRIES = 5", ALL_TOOLS, fmt=FORMATS[name])
    assert (turn.kind, turn.final_text) == ("final", "MAX_RETRIES = 5")
    empty = parse_turn("  \n", ALL_TOOLS, fmt=FORMATS[name])
    assert (empty.kind, empty.classes) == ("malformed", ["empty"])


def test_an_unknown_format_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown tool-call format 'xml'.*hermes, qwen3_coder, llama3_json, mistral"):
        load("xml")


def test_a_chat_template_in_another_format_is_refused_naming_both() -> None:
    from harnessrl.harness.formats import check_template, template_format
    from harnessrl.model.mini import QWEN_TEMPLATE
    from harnessrl.model.tokenizer import CHAT_TEMPLATE

    assert template_format(QWEN_TEMPLATE) == template_format(CHAT_TEMPLATE) == "hermes"
    check_template(QWEN_TEMPLATE, "hermes", "models/qwen")  # agrees: nothing to say
    check_template("{{ messages[0].content }}", "mistral", "models/plain")  # renders no calls
    with pytest.raises(
        ValueError, match=r"model.tool_format is 'qwen3_coder'.*models/qwen renders tool calls as 'hermes'"
    ):
        check_template(QWEN_TEMPLATE, "qwen3_coder", "models/qwen")
    qwen3 = "{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}"
    assert template_format(qwen3) == "qwen3_coder"


@pytest.mark.parametrize("name", list(FORMATS))
def test_sft_conversations_are_written_in_the_models_format(name: str) -> None:
    """The data folder stores calls in Hermes; formats.convert writes them as the model's format does,
    and leaves every other message as it was."""
    from harnessrl.harness.formats import convert, hermes

    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "What is MAX_RETRIES?"},
        {"role": "assistant", "content": hermes.render_calls(CALLS)},
        {"role": "tool", "content": "a.py:3:MAX_RETRIES = 5"},
        {"role": "assistant", "content": "MAX_RETRIES = 5"},
    ]
    out = convert(messages, FORMATS[name])
    assert out[:2] == messages[:2] and out[3:] == messages[3:]
    assert out[2]["content"] == FORMATS[name].render_calls(CALLS)
    turn = parse_turn(out[2]["content"], ALL_TOOLS, fmt=FORMATS[name])
    assert [(c.name, c.arguments) for c in turn.calls] == CALLS
    assert convert(messages, hermes) is messages  # the tiny recipe's path: untouched


@pytest.mark.parametrize("name", list(FORMATS))
def test_a_servers_tool_calls_come_back_as_the_models_own_text(name: str) -> None:
    """`harnessrl agent --endpoint` gets structured tool_calls; the harness reads them as the text the
    model wrote, in its format. Arguments that are not JSON stay as written, to be reported back."""
    from harnessrl.engines.openai_client import _calls_as_text

    fmt = FORMATS[name]
    served = [{"function": {"name": n, "arguments": json.dumps(a)}} for n, a in CALLS]
    turn = parse_turn(_calls_as_text(served, fmt), ALL_TOOLS, fmt=fmt)
    assert [(c.name, c.arguments) for c in turn.calls] == CALLS
    bad = _calls_as_text([{"function": {"name": "grep", "arguments": "{bad"}}], fmt)
    assert parse_turn(bad, ALL_TOOLS, fmt=fmt).kind == "malformed"


@pytest.mark.parametrize("name", list(FORMATS))
def test_the_miniatures_template_renders_calls_in_its_format(name: str) -> None:
    """`harnessrl model mini --tool-format NAME` writes Qwen2.5's template with calls in that format:
    a message's structured tool_calls render as text the format's parser reads back, and the base
    stage's check recognises the template's format."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from harnessrl.harness.formats import template_format
    from harnessrl.harness.protocol import render_tools
    from harnessrl.harness.tools import select
    from harnessrl.model.mini import chat_template

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    tok.chat_template = chat_template(name)
    assert template_format(tok.chat_template) == name
    calls = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in CALLS]
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": calls}]
    text = tok.apply_chat_template(messages, tools=render_tools(select(["grep", "read_file"])), tokenize=False)
    written = text.split("<|im_start|>assistant\n")[1].removesuffix("<|im_end|>\n")
    turn = parse_turn(written, ALL_TOOLS, fmt=FORMATS[name])
    assert [(c.name, c.arguments) for c in turn.calls] == CALLS


def test_rl_step_metrics_count_malformed_turns_by_class() -> None:
    from harnessrl.harness.episode import Trajectory, TurnRecord
    from harnessrl.rl.loop import malformed_classes

    def turn(i: int, classes: list[str]) -> TurnRecord:
        kind = "malformed" if classes else "final"
        return TurnRecord(index=i, kind=kind, text="", errors=["e"] * len(classes), classes=classes, policy_s=0.0)

    trajs = [
        Trajectory.model_construct(turns=[turn(0, [UNCLOSED]), turn(1, [UNKNOWN_TOOL, UNKNOWN_TOOL])]),
        Trajectory.model_construct(turns=[turn(0, [UNCLOSED, TEXT_OUTSIDE]), turn(1, [])]),
    ]
    counts = malformed_classes(trajs)
    assert {k: v for k, v in counts.items() if v} == {TEXT_OUTSIDE: 1, UNCLOSED: 2, UNKNOWN_TOOL: 1}
    assert set(counts) == set(CLASSES)  # every class, every step: the metrics' keys never change
