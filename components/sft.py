"""Stage 2, SFT: tool-call syntax from expert trajectories; loss on the assistant's tokens only.

Same engine, launcher and checkpoint conventions as CPT. The conversations are rendered segment by
segment (see harnessrl.model.tokenizer.render_ids), so the trained ids are exactly the ids the chat
template produces, and only the assistant's own output carries labels.
"""

import random

from kfp.dsl import Dataset, Input, Model, Output

from harnessrl.config import TrainConfig
from harnessrl.config.stages import shares
from harnessrl.data.build import read_jsonl
from harnessrl.harness import formats
from harnessrl.harness.spec import load_harness, save_harness, tools_named
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
    from harnessrl.harness.protocol import render_tools
    from harnessrl.harness.tools import select
    from harnessrl.model.checkpoint import load
    from harnessrl.model.prompts import PromptRenderer
    from harnessrl.train.engine import export_hf
    from harnessrl.train.loop import Run, masked_batches, train

    cfg = TrainConfig.model_validate(ctx.cfg["stage"])
    model, tok = load(ctx.parent, ctx.cfg["model"]["dtype"])
    rows = read_jsonl(ctx.data_dir / "sft.jsonl")
    if cfg.mix is not None:
        rows = mixed(rows, cfg.mix, ctx.cfg["seed"])
    # The data folder stores every conversation's calls in Hermes; a model trains in its own format,
    # rendered as its rollouts will prompt it: by its chat template, with the schemas of the tools the
    # conversation's system prompt names (a real model's template writes them into the prompt).
    fmt = formats.load(ctx.cfg["model"]["tool_format"])
    renderer = PromptRenderer(tok, cfg.seq_len, fmt)
    samples = []
    for row in rows:
        messages = formats.convert(row["messages"], fmt)
        names = tools_named(messages[0]["content"]) if messages[0]["role"] == "system" else None
        samples.append(renderer.conversation_ids(messages, render_tools(select(names)) if names else None))
    longest = max(len(ids) for ids, _ in samples)
    if longest > cfg.seq_len:  # cutting a conversation would train on one that never ended, silently
        raise ValueError(f"stages.sft.seq_len: {cfg.seq_len} is shorter than the longest conversation "
                         f"({longest} tokens); raise it to at least {longest}")  # fmt: skip
    run = Run(ctx.out / "metrics.jsonl", "sft", rank, world, ctx.state_dir, cfg.checkpoint_every)
    engine, last = train(model, masked_batches(samples, cfg, tok.pad_token_id, ctx.cfg["seed"], rank, world), cfg, run)
    export_hf(engine, model, tok, ctx.out, rank)
    if rank == 0:  # the harness its conversations were made in: its tools, system prompt and format
        spec = load_harness(ctx.data_dir)
        save_harness(spec.model_copy(update={"tool_format": ctx.cfg["model"]["tool_format"]}), ctx.out)
    return {
        "loss": last["loss"],
        "conversations": len(samples),
        "steps": cfg.steps,
        "world_size": world,
        "zero_stage": cfg.zero_stage,
    }


def mixed(rows: list[dict], mix: dict[str, float], seed: int) -> list[dict]:
    """As many conversations as the data has, shared among the mix's suites by weight: each suite's
    rows in a seeded order, cycled when its share is larger than what it has."""
    by_suite: dict[str, list[dict]] = {}
    for row in rows:
        by_suite.setdefault(row.get("suite", "?"), []).append(row)
    missing = sorted(set(mix) - set(by_suite))
    if missing:
        raise ValueError(f"stages.sft.mix: no conversations of suite {missing[0]!r} in sft.jsonl "
                         f"(suites there: {', '.join(sorted(by_suite))})")  # fmt: skip
    out = []
    for suite, n in shares(mix, len(rows)).items():
        pool = by_suite[suite][:]
        random.Random(f"sft-mix-{seed}-{suite}").shuffle(pool)
        out += [pool[i % len(pool)] for i in range(n)]
    return out


def sft(
    config: str, data: Input[Dataset], data_md5: str, code_hash: str, parent: Input[Model], checkpoint: Output[Model]
) -> float:
    """KFP component: supervised fine-tuning on tool calls."""
    from components.sft import work
    from harnessrl.stage import run_stage

    return run_stage("sft", work, config, data.path, data_md5, parent.path, checkpoint.path)
