"""Stage 2, SFT: tool-call syntax from expert trajectories; loss on the assistant's tokens only.

Same engine, launcher and checkpoint conventions as CPT. The conversations are rendered segment by
segment (see harnessrl.model.tokenizer.render_ids), so the trained ids are exactly the ids the chat
template produces, and only the assistant's own output carries labels.
"""

import shutil

from kfp.dsl import Dataset, Input, Model, Output

from harnessrl.config import TrainConfig
from harnessrl.data.build import read_jsonl
from harnessrl.harness.spec import HARNESS_FILE
from harnessrl.stage import StageContext


def work(ctx: StageContext) -> dict:
    cfg = TrainConfig.model_validate(ctx.cfg["stage"])
    if "cluster" in ctx.cfg:  # ranks across nodes: a TrainJob on Kubeflow Trainer, which this pod waits on
        from harnessrl.cluster import trainjob

        return trainjob.run("components.sft:train_job", ctx, cfg.world_size)
    from harnessrl.train.launch import launch

    return launch("components.sft:train_job", ctx, cfg.world_size)


def train_job(ctx: StageContext, rank: int, world: int) -> dict:
    """One rank's share of SFT; every rank runs this."""
    # torch and transformers load here, not at import: building the DAG (compile, cached re-runs) stays fast.
    from harnessrl.model.checkpoint import load
    from harnessrl.model.tokenizer import render_ids
    from harnessrl.train.engine import export_hf
    from harnessrl.train.loop import Run, masked_batches, train

    cfg = TrainConfig.model_validate(ctx.cfg["stage"])
    model, tok = load(ctx.parent, ctx.cfg["model"]["dtype"])
    samples = [render_ids(tok, row["messages"]) for row in read_jsonl(ctx.data_dir / "sft.jsonl")]
    longest = max(len(ids) for ids, _ in samples)
    if longest > cfg.seq_len:  # cutting a conversation would train on one that never ended, silently
        raise ValueError(f"stages.sft.seq_len: {cfg.seq_len} is shorter than the longest conversation "
                         f"({longest} tokens); raise it to at least {longest}")  # fmt: skip
    run = Run(ctx.out / "metrics.jsonl", "sft", rank, world, ctx.state_dir, cfg.checkpoint_every)
    engine, last = train(model, masked_batches(samples, cfg, tok.pad_token_id, ctx.cfg["seed"], rank, world), cfg, run)
    export_hf(engine, model, tok, ctx.out, rank)
    if rank == 0:  # the harness its conversations were made in: its tools and system prompt
        shutil.copy2(ctx.data_dir / HARNESS_FILE, ctx.out / HARNESS_FILE)
    return {
        "loss": last["loss"],
        "conversations": len(samples),
        "steps": cfg.steps,
        "world_size": world,
        "zero_stage": cfg.zero_stage,
    }


def sft(
    config: str, data: Input[Dataset], data_md5: str, code_hash: str, parent: Input[Model], checkpoint: Output[Model]
) -> float:
    """KFP component: supervised fine-tuning on tool calls."""
    from components.sft import work
    from harnessrl.stage import run_stage

    return run_stage("sft", work, config, data.path, data_md5, parent.path, checkpoint.path)
