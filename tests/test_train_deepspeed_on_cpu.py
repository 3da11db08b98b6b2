"""CPT and SFT on the DeepSpeed engine on CPU (gloo): golden losses, exact resume, ZeRO-2/3 on 2 processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from harnessrl.config import TrainConfig, compose
from harnessrl.metrics import read_metrics
from harnessrl.model.checkpoint import load
from harnessrl.stage import run_stage
from harnessrl.train import distributed
from harnessrl.train.loop import Run, packed_batches, train
from pipelines.routing import stage_slice
from tests.conftest import SMOKE

# fp32, ZeRO-0, seed 0, the smoke recipe's base model and corpus: DeepSpeed's fp32 losses equal a
# plain torch loop's, so these also pin the model, the tokenizer and the data build.
GOLDEN_CPT_LOSSES = [7.0019, 6.6486, 6.3833]  # warmup_steps 5 (conf/recipe/tiny.yaml); the smoke data's BPE
# Compared to atol 1e-4, rtol 0: the golden values are rounded to 4 decimals (up to 5e-5 off), and fp32
# sums in another order (another CPU, BLAS or torch build) move a loss near 7 by a few 1e-6. A changed
# model, tokenizer, data or schedule moves these losses by far more.
GOLDEN_ATOL = 1e-4


def cpt_stage(tiny_base: dict, out: Path, *overrides: str) -> dict:
    from components.cpt import work

    cfg = compose([*SMOKE, *overrides])
    slice_ = json.dumps(stage_slice(cfg, "cpt"))
    run_stage("cpt", work, slice_, str(tiny_base["data"]), "md5", str(tiny_base["base"]), str(out))
    return {"cfg": cfg, "metrics": read_metrics(out / "metrics.jsonl")}


def test_golden_cpt_losses_single_process(tiny_base: dict, tmp_path: Path) -> None:
    got = cpt_stage(tiny_base, tmp_path / "cpt")["metrics"]
    torch.testing.assert_close([m["loss"] for m in got], GOLDEN_CPT_LOSSES, rtol=0, atol=GOLDEN_ATOL)
    assert all(m["grad_norm"] > 0 and m["tokens_per_s"] > 0 and m["lr"] > 0 for m in got)
    model, _ = load(tmp_path / "cpt")  # exported HF safetensors load as they are
    assert sum(p.numel() for p in model.parameters()) == 459392


def corpus_tokens(tiny_base: dict) -> list[int]:
    from harnessrl.data.corpus import corpus_texts
    from harnessrl.model import tokenizer

    _, tok = load(tiny_base["base"])
    return tokenizer.corpus_tokens(tok, corpus_texts(tiny_base["data"]))


class Crash(Exception):
    pass


def crash_after(batches, n: int):
    for i, b in enumerate(batches):
        if i == n:
            raise Crash
        yield b


@pytest.mark.parametrize("zero_stage", [0, 2])
def test_resume_reproduces_the_uninterrupted_losses(tiny_base: dict, tmp_path: Path, zero_stage: int) -> None:
    distributed.setup()
    tokens = corpus_tokens(tiny_base)
    cfg = TrainConfig(
        steps=6,
        micro_batch_size=2,
        grad_accum=2,
        seq_len=64,
        lr=3e-3,
        warmup_steps=2,
        zero_stage=zero_stage,
        log_every=100,
    )

    def fresh():
        torch.manual_seed(0)
        return load(tiny_base["base"])[0]

    train(fresh(), packed_batches(tokens, cfg, 0), cfg, Run(tmp_path / "full.jsonl", "full"))
    state = tmp_path / "state"
    with pytest.raises(Crash):  # killed during step 5, after the state of step 4 was saved
        train(
            fresh(),
            crash_after(packed_batches(tokens, cfg, 0), 9),
            cfg,
            Run(tmp_path / "a.jsonl", "a", state_dir=state, checkpoint_every=2),
        )
    train(
        fresh(),
        packed_batches(tokens, cfg, 0),
        cfg,
        Run(tmp_path / "b.jsonl", "b", state_dir=state, checkpoint_every=2),
    )
    full, resumed = read_metrics(tmp_path / "full.jsonl"), read_metrics(tmp_path / "b.jsonl")
    # Steps 1-4 come from the crashed run's saved metrics, 5-6 were trained after the resume.
    assert [m["step"] for m in resumed] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(full, resumed, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-6)
        assert b["lr"] == pytest.approx(a["lr"])


def test_kill_while_a_state_is_saved_keeps_each_step_once(
    tiny_base: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill between the metrics snapshot and `latest` moving (here: inside step 4's save) resumes
    from step 2 and redoes 3-4: every step's row exists once, none lost and none doubled."""
    import harnessrl.train.loop as loop

    distributed.setup()
    tokens = corpus_tokens(tiny_base)
    cfg = TrainConfig(steps=6, micro_batch_size=2, seq_len=64, lr=3e-3, warmup_steps=2, log_every=100)
    state = tmp_path / "state"
    real_save = loop.save_state

    def save_then_die_at_4(engine, state_dir, step, extra=None):
        if step == 4:
            raise Crash
        real_save(engine, state_dir, step, extra)

    monkeypatch.setattr(loop, "save_state", save_then_die_at_4)
    torch.manual_seed(0)
    with pytest.raises(Crash):
        train(
            load(tiny_base["base"])[0],
            packed_batches(tokens, cfg, 0),
            cfg,
            Run(tmp_path / "a.jsonl", "a", state_dir=state, checkpoint_every=2),
        )
    assert [m["step"] for m in read_metrics(state / "metrics.jsonl")] == [1, 2, 3, 4]  # snapshot came first
    monkeypatch.setattr(loop, "save_state", real_save)
    torch.manual_seed(0)
    train(
        load(tiny_base["base"])[0],
        packed_batches(tokens, cfg, 0),
        cfg,
        Run(tmp_path / "b.jsonl", "b", state_dir=state, checkpoint_every=2),
    )
    assert [m["step"] for m in read_metrics(tmp_path / "b.jsonl")] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("zero_stage", [2, 3])
def test_two_process_zero_on_gloo(tiny_base: dict, tmp_path: Path, zero_stage: int) -> None:
    out = tmp_path / f"cpt-z{zero_stage}"
    run = cpt_stage(
        tiny_base,
        out,
        "stages.cpt.world_size=2",
        f"stages.cpt.zero_stage={zero_stage}",
        "stages.cpt.micro_batch_size=2",
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["metrics"]["world_size"] == 2 and manifest["metrics"]["zero_stage"] == zero_stage
    losses = [m["loss"] for m in run["metrics"]]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    model, _ = load(out)  # ZeRO-3 shards were gathered into one HF checkpoint
    ref, _ = load(tiny_base["base"])
    changed = [
        n
        for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True)
        if not torch.equal(p, q)
    ]
    assert len(changed) == len(list(ref.parameters()))  # every tensor was trained and exported
    assert not any((out.parent / name).exists() for name in (".launch.json", ".launch-result.json"))


def test_bf16_zero2_single_process(tiny_base: dict, tmp_path: Path) -> None:
    run = cpt_stage(tiny_base, tmp_path / "bf16", "stages.cpt.precision=bf16", "stages.cpt.zero_stage=2")
    losses = [m["loss"] for m in run["metrics"]]
    assert losses[0] == pytest.approx(GOLDEN_CPT_LOSSES[0], abs=0.05)  # bf16 rounding, same model and data
    assert losses[-1] < losses[0]


def test_sft_trains_only_assistant_tokens(tiny_base: dict, tmp_path: Path) -> None:
    from components.sft import work
    from harnessrl.data.build import read_jsonl
    from harnessrl.model.tokenizer import render_ids

    cfg = compose(SMOKE)
    run_stage(
        "sft",
        work,
        json.dumps(stage_slice(cfg, "sft")),
        str(tiny_base["data"]),
        "md5",
        str(tiny_base["base"]),
        str(tmp_path / "sft"),
    )
    metrics = read_metrics(tmp_path / "sft" / "metrics.jsonl")
    assert len(metrics) == cfg.stages.sft.steps and metrics[-1]["loss"] < metrics[0]["loss"]
    _, tok = load(tiny_base["base"])
    ids, mask = render_ids(tok, read_jsonl(tiny_base["data"] / "sft.jsonl")[0]["messages"])
    trained = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert "<tool_call>" in trained and "<|im_end|>" in trained
    assert "<tool_response>" not in trained and "You are a coding agent" not in trained


def test_sft_batches_come_from_one_length_bucket_and_cover_every_conversation() -> None:
    from harnessrl.train.loop import masked_batches

    lengths = [5, 6, 7, 30, 31, 5, 40, 6, 8, 33]
    samples = [([i] * n, [True] * n) for i, n in enumerate(lengths)]  # each conversation's ids name it
    cfg = compose(SMOKE).stages.sft.model_copy(update={"micro_batch_size": 3, "length_buckets": [20]})
    batches = masked_batches(samples, cfg, pad_id=-1, seed=0)
    seen = []
    for x, _ in (next(batches) for _ in range(4)):  # one epoch: 6 short and 4 long make 2 + 2 batches
        rows = [int(r[0]) for r in x]
        assert len({lengths[i] > 20 for i in rows}) == 1  # never a short one padded to a long one's width
        assert x.shape[1] == max(lengths[i] for i in rows)
        seen += rows
    assert sorted(seen) == list(range(len(samples)))


def test_embed_lr_moves_the_embeddings_at_their_own_rate(tiny_base: dict) -> None:
    """One constant-rate AdamW step moves each weight by about its group's lr (Adam's first step is
    lr * sign(grad)): the tied embeddings by embed_lr, the rest by lr."""
    from harnessrl.train.engine import build_engine

    model, _ = load(tiny_base["base"])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = TrainConfig(steps=1, micro_batch_size=2, seq_len=16, lr=1e-4, embed_lr=1e-2, schedule="constant")
    engine = build_engine(model, cfg)
    x = torch.randint(10, 500, (2, 16), generator=torch.Generator().manual_seed(0))
    engine.backward(model(input_ids=x, labels=x).loss)
    engine.step()
    moved = {n: float((p.detach() - before[n]).abs().max()) for n, p in model.named_parameters()}
    assert moved["model.embed_tokens.weight"] == pytest.approx(1e-2, rel=0.01)
    assert max(v for n, v in moved.items() if "embed" not in n) == pytest.approx(1e-4, rel=0.01)


def test_the_loss_on_labelled_positions_equals_the_models_own(tiny_base: dict) -> None:
    """lm_loss runs the output projection only where labels are; the number is HF's loss."""
    import torch

    from harnessrl.train.loop import lm_loss

    model, _ = load(tiny_base["base"])
    x = torch.randint(10, 500, (3, 17), generator=torch.Generator().manual_seed(0))
    y = x.clone()
    y[:, :9] = -100  # a prompt carries no labels
    y[1, 12:] = -100
    assert float(lm_loss(model, x, y)) == pytest.approx(float(model(input_ids=x, labels=y).loss), abs=1e-5)


@pytest.mark.parametrize("zero_stage", [2, 3])
def test_two_nodes_at_a_c10d_rendezvous_equal_one_node_with_two_ranks(
    tiny_base: dict, tmp_path: Path, zero_stage: int
) -> None:
    """The same entry point under torchrun on two "nodes" (two launchers, one rank each, meeting at a
    c10d rendezvous on loopback), as each node of a Kubeflow Trainer TrainJob runs it."""
    import os
    import subprocess

    from harnessrl.stage import StageContext
    from harnessrl.train.launch import torchrun_command
    from harnessrl.train.spec import write_spec

    overrides = ["stages.cpt.world_size=2", f"stages.cpt.zero_stage={zero_stage}", "stages.cpt.micro_batch_size=2"]
    one_node = [m["loss"] for m in cpt_stage(tiny_base, tmp_path / "one-node", *overrides)["metrics"]]

    out = tmp_path / "two-nodes"
    out.mkdir()
    cfg = stage_slice(compose([*SMOKE, *overrides]), "cpt")
    ctx = StageContext(cfg=cfg, parent=tiny_base["base"], out=out, data_dir=tiny_base["data"], state_dir=None)
    spec, result = write_spec("components.cpt:train_job", ctx)
    endpoint = f"127.0.0.1:{distributed.free_port()}"
    env = os.environ | {"OMP_NUM_THREADS": "1", "HARNESSRL_THREADS": "1"}
    nodes = [
        subprocess.Popen(torchrun_command(spec, 1, nnodes=2, rdzv_endpoint=endpoint, rdzv_id=f"t{zero_stage}"), env=env)
        for _ in range(2)
    ]
    assert [n.wait(timeout=300) for n in nodes] == [0, 0]
    two_nodes = [m["loss"] for m in read_metrics(out / "metrics.jsonl")]
    assert json.loads(result.read_text())["world_size"] == 2
    assert two_nodes == pytest.approx(one_node, abs=1e-6)
    assert (out / "model.safetensors").is_file()  # rank 0 exported the gathered checkpoint
