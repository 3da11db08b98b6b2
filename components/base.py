"""Stage 0, base: the model the chain starts from.

A tiny recipe trains a byte-level BPE on the code corpus and the tool-call conversations, then
builds a randomly initialised model from config. A real recipe validates a local HF folder and
links its files into the checkpoint, so lineage starts from the exact bytes that were loaded.
"""

import os
import shutil
from pathlib import Path

from kfp.dsl import Dataset, Input, Model, Output

from harnessrl.config import ModelConfig
from harnessrl.data.build import read_jsonl
from harnessrl.data.corpus import corpus_texts
from harnessrl.harness.formats import check_template
from harnessrl.stage import StageContext


def work(ctx: StageContext) -> dict:
    # torch and transformers load here, not at import: building the DAG (compile, cached re-runs) stays fast.
    from harnessrl.model.checkpoint import build_from_arch, load, save
    from harnessrl.model.tokenizer import PAD, as_hf, segments, train_bpe

    model_cfg = ModelConfig.model_validate(ctx.cfg["model"])
    if model_cfg.path is not None:
        model, tok = load(model_cfg.path, model_cfg.dtype)  # fails with the path named if unusable
        check_template(tok.chat_template, model_cfg.tool_format, model_cfg.path)
        for f in Path(model_cfg.path).iterdir():
            if f.is_file():
                _link_or_copy(f, ctx.out / f.name)
        return {"params": sum(p.numel() for p in model.parameters()), "source": model_cfg.path}

    texts = list(corpus_texts(ctx.data_dir))
    texts += ["".join(t for t, _ in segments(row["messages"])) for row in read_jsonl(ctx.data_dir / "sft.jsonl")]
    tok = as_hf(train_bpe(texts, model_cfg.arch.vocab_size))
    model = build_from_arch(model_cfg.arch, tok.convert_tokens_to_ids(PAD), seed=ctx.cfg["seed"])
    save(model, tok, ctx.out)
    return {"params": sum(p.numel() for p in model.parameters()), "vocab": len(tok)}


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another filesystem
        shutil.copy2(src, dst)


def base(config: str, data: Input[Dataset], data_md5: str, code_hash: str, checkpoint: Output[Model]) -> float:
    """KFP component: build or load the base model."""
    from components.base import work
    from harnessrl.stage import run_stage

    return run_stage("base", work, config, data.path, data_md5, None, checkpoint.path)
