"""Stage 2, SFT: tool-call syntax from expert conversations; loss on assistant tokens only."""

from kfp.dsl import Input, Model, Output

from harnessrl.config import TrainConfig
from harnessrl.data.build import read_jsonl
from harnessrl.stage import StageContext


def work(ctx: StageContext) -> dict:
    # torch and transformers load here, not at import: building the DAG (compile, cached re-runs) stays fast.
    from harnessrl.model.checkpoint import load, save
    from harnessrl.model.tokenizer import render_ids
    from harnessrl.train.loop import masked_batches, train

    cfg = TrainConfig.model_validate(ctx.cfg["stage"])
    model, tok = load(ctx.parent, ctx.cfg["model"]["dtype"])
    samples = [render_ids(tok, row["messages"]) for row in read_jsonl(ctx.data_dir / "sft.jsonl")]
    batches = masked_batches(samples, cfg, tok.pad_token_id, ctx.cfg["seed"])
    last = train(model, batches, cfg, ctx.out / "metrics.jsonl", "sft")
    save(model, tok, ctx.out)
    return {"loss": last["loss"], "conversations": len(samples), "steps": cfg.steps}


def sft(
    config: str, data_dir: str, data_md5: str, code_hash: str, parent: Input[Model], checkpoint: Output[Model]
) -> float:
    """KFP component: supervised fine-tuning on tool calls."""
    from components.sft import work
    from harnessrl.stage import run_stage

    return run_stage("sft", work, config, data_dir, data_md5, parent.path, checkpoint.path)
