"""Stage 1, CPT: continued pretraining on the recipe's code corpus, packed into fixed windows."""

from kfp.dsl import Input, Model, Output

from harnessrl.config import TrainConfig
from harnessrl.data.build import corpus_files
from harnessrl.stage import StageContext


def work(ctx: StageContext) -> dict:
    # torch and transformers load here, not at import: building the DAG (compile, cached re-runs) stays fast.
    from harnessrl.model.checkpoint import load, save
    from harnessrl.train.loop import packed_batches, train

    cfg = TrainConfig.model_validate(ctx.cfg["stage"])
    model, tok = load(ctx.parent, ctx.cfg["model"]["dtype"])
    tokens: list[int] = []
    for path in corpus_files(ctx.data_dir):
        tokens += [*tok.encode(path.read_text(), add_special_tokens=False), tok.eos_token_id]
    last = train(model, packed_batches(tokens, cfg, ctx.cfg["seed"]), cfg, ctx.out / "metrics.jsonl", "cpt")
    save(model, tok, ctx.out)
    return {"loss": last["loss"], "corpus_tokens": len(tokens), "steps": cfg.steps}


def cpt(
    config: str, data_dir: str, data_md5: str, code_hash: str, parent: Input[Model], checkpoint: Output[Model]
) -> float:
    """KFP component: continued pretraining."""
    from components.cpt import work
    from harnessrl.stage import run_stage

    return run_stage("cpt", work, config, data_dir, data_md5, parent.path, checkpoint.path)
