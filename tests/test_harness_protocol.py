"""The tool-call protocol: classification of every kind of turn, precise errors, and a fuzz test that
the parser never raises."""

import json
import random

import pytest
from pydantic import BaseModel, ConfigDict

from harnessrl.harness.protocol import (
    ParsedTurn,
    parse_turn,
    render_calls,
    render_errors,
    render_tool_responses,
    render_tools,
    tool_messages,
)
from harnessrl.harness.tools import ALL_TOOLS, Tool

TOOLS = ALL_TOOLS


def call(name, **arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def test_plain_text_is_final():
    p = parse_turn("  The answer is 42.\n", TOOLS)
    assert p.kind == "final" and p.final_text == "The answer is 42." and p.calls == [] and p.errors == []


def test_one_call():
    p = parse_turn(call("read_file", path="a.py", start_line=3), TOOLS)
    assert p.kind == "tool_calls"
    assert [(c.name, c.arguments) for c in p.calls] == [("read_file", {"path": "a.py", "start_line": 3})]


def test_several_calls_keep_order_and_whitespace_between_is_fine():
    text = call("list_dir") + "\n\n  " + call("read_file", path="b") + "\n" + call("grep", pattern="x")
    p = parse_turn(text, TOOLS)
    assert p.kind == "tool_calls" and [c.name for c in p.calls] == ["list_dir", "read_file", "grep"]


def test_missing_arguments_means_empty_object():
    p = parse_turn('<tool_call>{"name": "list_dir"}</tool_call>', TOOLS)
    assert p.kind == "tool_calls" and p.calls[0].arguments == {}


def test_leading_think_block_is_set_aside():
    p = parse_turn("<think>need to look at a.py</think>\n" + call("read_file", path="a.py"), TOOLS)
    assert p.kind == "tool_calls" and p.reasoning == "need to look at a.py"
    p = parse_turn("<think>easy</think>\nIt is 4.", TOOLS)
    assert p.kind == "final" and p.final_text == "It is 4." and p.reasoning == "easy"


MALFORMED = {
    "unclosed": ('<tool_call>{"name": "list_dir", "arguments": {}}', "call 1: <tool_call> is never closed"),
    "unclosed_second": (call("list_dir") + '<tool_call>{"name": "list_dir"}', "call 2: <tool_call> is never"),
    "nested_open": (
        '<tool_call><tool_call>{"name": "list_dir"}</tool_call>',
        "call 1: <tool_call> opened again",
    ),
    "stray_close": ("all done </tool_call>", "stray </tool_call>"),
    "stray_close_after_call": (call("list_dir") + "</tool_call>", "after 1 complete calls"),
    "bad_json": ('<tool_call>{"name": "list_dir", "arguments": {</tool_call>', "call 1: invalid JSON"),
    "single_quotes": ("<tool_call>{'name': 'list_dir'}</tool_call>", "call 1: invalid JSON"),
    "non_object": ("<tool_call>[1, 2]</tool_call>", "call 1: expected a JSON object"),
    "json_string": ('<tool_call>"list_dir"</tool_call>', "got str"),
    "missing_name": ('<tool_call>{"arguments": {}}</tool_call>', "call 1: missing 'name'"),
    "name_not_string": ('<tool_call>{"name": 3}</tool_call>', "call 1: 'name' must be a string"),
    "unknown_tool": (call("rm_rf", path="/"), "call 1: unknown tool 'rm_rf'"),
    "extra_key": (
        '<tool_call>{"name": "list_dir", "arguments": {}, "id": 1}</tool_call>',
        "unexpected keys ['id']",
    ),
    "arguments_as_string": (
        '<tool_call>{"name": "list_dir", "arguments": "{}"}</tool_call>',
        "call 1: 'arguments' must be a JSON object, got str",
    ),
    "missing_required_arg": (
        call("edit_file", path="a", old_str="x"),
        "call 1 (edit_file): invalid arguments: new_str",
    ),
    "wrong_arg_type": (call("read_file", path=["a"]), "call 1 (read_file): invalid arguments: path"),
    "arg_out_of_range": (call("read_file", path="a", start_line=0), "start_line: Input should be greater"),
    "unknown_arg": (
        call("read_file", path="a", encoding="latin1"),
        "encoding: Extra inputs are not permitted",
    ),
    "text_before_call": ("Let me look.\n" + call("list_dir"), "text outside the tool calls: 'Let me look.'"),
    "text_after_call": (call("list_dir") + "\nThe answer is 3.", "text outside the tool calls"),
    "model_writes_response": ("<tool_response>ok</tool_response>", "tool responses come from the harness"),
    "empty": ("   \n", "empty turn"),
    "unclosed_think": ("<think>hmm " + call("list_dir"), "<think> is never closed"),
    "second_think": ("<think>a</think>" + call("list_dir") + "<think>b</think>", "may appear only once"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed(case):
    text, expected = MALFORMED[case]
    p = parse_turn(text, TOOLS)
    assert p.kind == "malformed", p
    assert p.calls == [] and p.final_text is None
    assert any(expected in e for e in p.errors), p.errors


def test_too_many_calls():
    p = parse_turn("".join(call("list_dir") for _ in range(5)), TOOLS, max_calls=4)
    assert p.kind == "malformed" and p.errors == ["5 tool calls in one turn; at most 4 are allowed"]
    assert parse_turn("".join(call("list_dir") for _ in range(4)), TOOLS, max_calls=4).kind == "tool_calls"


def test_errors_name_each_bad_call_and_all_of_them():
    text = call("list_dir") + "<tool_call>nope</tool_call>" + call("read_file") + call("ghost")
    p = parse_turn(text, TOOLS)
    assert p.kind == "malformed"
    assert [e.split(":")[0] for e in p.errors] == ["call 2", "call 3 (read_file)", "call 4"]
    rendered = render_errors(p)
    assert rendered.startswith("error:") and all(e in rendered for e in p.errors)


def test_render_calls_round_trips():
    calls = [
        ("edit_file", {"path": "a.py", "old_str": "x = 1", "new_str": 'x = "<tool_call>"'}),
        ("list_dir", {}),
    ]
    p = parse_turn(render_calls(calls), TOOLS)
    assert p.kind == "tool_calls" and [(c.name, c.arguments) for c in p.calls] == calls


def test_render_tools_openai_format():
    class TitleArgs(BaseModel):
        model_config = ConfigDict(extra="forbid")
        title: str
        count: int = 1

    tools = {
        "read_file": ALL_TOOLS["read_file"],
        "titled": Tool("titled", "A tool.", TitleArgs, lambda c, a: ""),
    }
    out = render_tools(tools)
    assert [t["type"] for t in out] == ["function", "function"]
    fn = out[0]["function"]
    assert fn["name"] == "read_file" and fn["description"]
    params = fn["parameters"]
    assert params["type"] == "object" and params["required"] == ["path"]
    assert params["additionalProperties"] is False
    assert set(params["properties"]) == {"path", "start_line", "end_line"}
    assert "title" not in json.dumps(params)  # pydantic's titles are stripped...
    titled = out[1]["function"]["parameters"]
    assert set(titled["properties"]) == {"title", "count"}  # ...but a field called "title" stays
    assert "title" not in titled["properties"]["title"]
    json.dumps(render_tools(ALL_TOOLS))  # every tool's schema is plain JSON


def test_render_tool_responses():
    assert (
        render_tool_responses(["a", "b"])
        == "<tool_response>\na\n</tool_response>\n<tool_response>\nb\n</tool_response>"
    )
    assert tool_messages(["a"]) == [{"role": "tool", "content": "a"}]


def test_non_str_input_does_not_raise():
    for bad in (None, 3, b"<tool_call>", ["x"]):
        assert parse_turn(bad, TOOLS).kind == "malformed"  # type: ignore[arg-type]


def test_pathological_json_does_not_raise():
    for body in (
        "[" * 200_000,
        '{"a":' * 50_000,
        "1" * 10_000,
        '{"name": "list_dir", "arguments": ' + "[" * 5000,
    ):
        assert parse_turn(f"<tool_call>{body}</tool_call>", TOOLS).kind == "malformed"


# -- fuzz ----------------------------------------------------------------------------------------

FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<tool_call",
    "tool_call>",
    "{",
    "}",
    "[",
    "]",
    '"',
    ":",
    ",",
    "\n",
    " ",
    '"name"',
    '"arguments"',
    '"read_file"',
    '"path"',
    '"list_dir"',
    "null",
    "true",
    "1e999",
    "-0",
    "\\u0000",
    "\\",
    "\x00",
    "é",
    "😀",
    "\ud800",
    "answer",
    "42",
]


def _valid_turns(rng):
    names = list(TOOLS)
    samples = {
        "read_file": {"path": "a.py"},
        "list_dir": {},
        "grep": {"pattern": "x"},
        "search": {"query": "q"},
        "edit_file": {"path": "a", "old_str": "b", "new_str": "c"},
        "run_terminal": {"command": "ls"},
        "answer": {"text": "t"},
    }
    calls = [(n, samples[n]) for n in rng.sample(sorted(samples), rng.randint(1, 3))]
    del names
    return render_calls(calls)


def _mutate(rng, s):
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        i = rng.randrange(len(s) + 1)
        if op == 0 and s:
            s = s[:i] + s[i + 1 :]
        elif op == 1:
            s = s[:i] + rng.choice(FRAGMENTS) + s[i:]
        elif op == 2:
            j = rng.randrange(len(s) + 1)
            s = s[: min(i, j)] + s[max(i, j) :]
        elif op == 3:
            s = s + s[i:]
        else:
            s = s[:i] + chr(rng.randrange(0x110000)) + s[i:]
    return s


def _check_invariants(p, text):
    assert isinstance(p, ParsedTurn)
    if p.kind == "tool_calls":
        assert p.calls and not p.errors and p.final_text is None
        for c in p.calls:
            TOOLS[c.name].args.model_validate(c.arguments)
    elif p.kind == "final":
        assert p.final_text and not p.calls and not p.errors
        assert "<tool_call>" not in p.final_text and "</tool_call>" not in p.final_text
    else:
        assert p.kind == "malformed" and p.errors and not p.calls and p.final_text is None


def test_fuzz_never_raises():
    rng = random.Random(1234)
    kinds = {"tool_calls": 0, "final": 0, "malformed": 0}
    for i in range(20_000):
        r = i % 4
        if r == 0:
            text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 30)))
        elif r == 1:
            text = "".join(chr(rng.randrange(0x110000)) for _ in range(rng.randint(0, 40)))
        elif r == 2:
            text = _mutate(rng, _valid_turns(rng))
        else:
            text = _valid_turns(rng) if rng.random() < 0.5 else "ok " + _mutate(rng, "fine answer")
        p = parse_turn(text, TOOLS, max_calls=2)
        _check_invariants(p, text)
        kinds[p.kind] += 1
    # The generator reaches every class, so the invariants above were exercised for each.
    assert all(n > 100 for n in kinds.values()), kinds
