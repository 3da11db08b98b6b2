"""Stage 1, CPT: continued pretraining on the recipe's code corpus, on the DeepSpeed engine.

Packed fixed-length windows of the corpus, ZeRO 0-3, fp32 or bf16, on 1 process in-process or on
`world_size` processes through torchrun (gloo on CPU, nccl on GPU), or, past one node's GPUs, as a
TrainJob (harnessrl/cluster/trainjob.py). Exports HF safetensors.
"""

from kfp.dsl import Dataset, Input, Model, Output

from harnessrl.config import TrainConfig
from harnessrl.data.corpus import corpus_shards, shard_texts
from harnessrl.stage import StageContext


def work(ctx: StageContext) -> dict:
    cfg = TrainConfig.model_validate(ctx.cfg["stage"])
    if cfg.length_buckets:
        raise ValueError("stages.cpt.length_buckets: CPT packs fixed-length windows; length buckets are for SFT")
    if cfg.mix is not None:
        raise ValueError("stages.cpt.mix: CPT reads the code corpus, which has no suites; a mix is for SFT")
    if "cluster" in ctx.cfg:  # ranks across nodes: a TrainJob on Kubeflow Trainer, which this pod waits on
        from harnessrl.cluster import trainjob

        return trainjob.run("components.cpt:train_job", ctx, cfg.world_size)
    from harnessrl.train.launch import launch

    return launch("components.cpt:train_job", ctx, cfg.world_size)


def train_job(ctx: StageContext, rank: int, world: int) -> dict:
    """One rank's share of CPT; every rank runs this."""
    # torch and transformers load here, not at import: building the DAG (compile, cached re-runs) stays fast.
    from harnessrl.model.checkpoint import load
    from harnessrl.model.tokenizer import corpus_tokens
    from harnessrl.train.engine import export_hf
    from harnessrl.train.loop import Run, packed_batches, train

    cfg = TrainConfig.model_validate(ctx.cfg["stage"])
    model, tok = load(ctx.parent, ctx.cfg["model"]["dtype"])
    shards = [corpus_tokens(tok, shard_texts(s)) for s in corpus_shards(ctx.data_dir)]
    tokens = [t for shard in shards for t in shard]
    run = Run(ctx.out / "metrics.jsonl", "cpt", rank, world, ctx.state_dir, cfg.checkpoint_every)
    engine, last = train(model, packed_batches(tokens, cfg, ctx.cfg["seed"], rank, world), cfg, run)
    export_hf(engine, model, tok, ctx.out, rank)
    return {
        "loss": last["loss"],
        "corpus_tokens": len(tokens),
        "corpus_shard_tokens": [len(s) for s in shards],
        "steps": cfg.steps,
        "world_size": world,
        "zero_stage": cfg.zero_stage,
    }


def cpt(
    config: str, data: Input[Dataset], data_md5: str, code_hash: str, parent: Input[Model], checkpoint: Output[Model]
) -> float:
    """KFP component: continued pretraining."""
    from components.cpt import work
    from harnessrl.stage import run_stage

    return run_stage("cpt", work, config, data.path, data_md5, parent.path, checkpoint.path)
