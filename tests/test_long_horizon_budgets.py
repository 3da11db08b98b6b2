"""The long-horizon stage's budgets hold on every task of the default data, in the tiny model's own
tokens: conf/recipe/tiny.yaml sizes them so that a terse summary leaves room for the
rest of the episode, a verbose one does not, a whole summary fits at the request (nothing is dropped
before it), and truncation loses the first search before the answer.
A change to the prompt, the tokenizer or the suite that breaks that geometry fails here, not silently
in a run whose long-horizon numbers would then mean something else."""

from __future__ import annotations

import json
import re
from pathlib import Path

from harnessrl.config import compose
from harnessrl.data.build import read_jsonl
from harnessrl.harness.context import SUMMARIZE_REQUEST
from pipelines.routing import stage_slice


def test_the_context_budgets_separate_terse_from_verbose_summaries(default_data: Path, tmp_path: Path) -> None:
    from components.base import work
    from harnessrl.model.checkpoint import load
    from harnessrl.model.prompts import PromptRenderer
    from harnessrl.stage import run_stage

    cfg = compose([])
    run_stage("base", work, json.dumps(stage_slice(cfg, "base")), str(default_data), "md5", None, str(tmp_path / "b"))
    model, tok = load(tmp_path / "b", "float32")
    count = lambda messages: PromptRenderer(tok, model.config.max_position_embeddings).count(messages, [])
    lh = cfg.stages.long_horizon
    segments = [
        r["messages"]
        for r in read_jsonl(default_data / "sft.jsonl")
        if r["suite"] == "long_horizon"  # multi_lookup asks the same question, with no context budget
    ]
    first = [
        s for s in segments if s[2]["role"] == "assistant"
    ]  # [system, task, A, result, B, result, request, summary]
    later = [s for s in segments if s[2]["role"] == "user"]  # [system, task, state, C, result, ...]
    assert first and later
    for s in first:
        assert s[6]["content"] == SUMMARIZE_REQUEST
        one, two = count(s[:4]), count(s[:6])
        assert one < lh.context.trigger <= two, "the stage must summarize after the second search, not the first"
        # Truncation: a third search like the second, and room for the answer, overflow the budget.
        assert two + (two - one) + lh.max_new_tokens > lh.context.budget
        summary = len(tok(s[7]["content"], add_special_tokens=False)["input_ids"]) + 1  # and its end token
        assert summary <= lh.context.summary_max_tokens, "every expert summary, verbose too, fits the cap"
        # A whole summary fits under the budget at the request: nothing is dropped before it.
        assert count(s[:7]) + lh.context.summary_max_tokens <= lh.context.budget
    terse = [s for s in later if re.fullmatch(r"Summary 1:\n\w+ = \d+, \w+ = \d+\n\d+ turns left\.", s[2]["content"])]
    verbose = [s for s in later if s[2]["content"].startswith("Summary 1:") and "Still to find" in s[2]["content"]]
    assert terse and verbose
    assert all(count(s[:5]) < lh.context.trigger for s in terse), "a terse summary leaves room to answer"
    assert all(count(s[:5]) >= lh.context.trigger for s in verbose), "a verbose one fills the context again"
