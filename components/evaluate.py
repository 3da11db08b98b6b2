"""Stage 5, eval: every checkpoint of the chain on the same held-out tasks and seeds.

The chain comes from the lineage manifests (final checkpoint -> parent -> ... -> base), so the
numbers line up with the checkpoints' ids.
"""

from kfp.dsl import Artifact, Input, Model, Output

from harnessrl.config import EvalConfig
from harnessrl.data.build import read_jsonl
from harnessrl.io import write_json
from harnessrl.lineage.manifest import chain
from harnessrl.rewards.lookup_call import score


def evaluate_checkpoint(path, tasks: list[dict], cfg: EvalConfig, repos, dtype: str) -> dict:
    # torch and transformers load here, not at import: building the DAG (compile, cached re-runs) stays fast.
    from harnessrl.engines.hf import generate
    from harnessrl.model.checkpoint import load
    from harnessrl.model.tokenizer import render_ids

    model, tok = load(path, dtype)
    prompts = [render_ids(tok, t["messages"], add_generation_prompt=True)[0] for t in tasks]
    rows = []
    for seed in cfg.seeds:
        for c, t in zip(generate(model, tok, prompts, cfg.max_new_tokens, 0.0, seed), tasks, strict=False):
            rows.append(score(tok.decode(c.token_ids), t, repos))
    n = len(rows)
    return {
        "success": sum(r["success"] for r in rows) / n,
        "malformed": sum(r["malformed"] for r in rows) / n,
        "episodes": n,
    }


def work(ctx) -> dict:
    cfg = EvalConfig.model_validate(ctx.cfg["stage"])
    tasks = read_jsonl(ctx.data_dir / "heldout.jsonl")[: cfg.num_tasks]
    results = []
    for path, manifest in reversed(chain(ctx.parent)):
        m = evaluate_checkpoint(path, tasks, cfg, ctx.data_dir / "repos", ctx.cfg["model"]["dtype"])
        results.append({"stage": manifest["stage"], "checkpoint": manifest["id"], "path": str(path), **m})
        print(f"[eval] {manifest['stage']:<13} success {m['success']:.3f} malformed {m['malformed']:.3f}", flush=True)
    write_json(ctx.out / "report.json", {"suites": cfg.suites, "seeds": cfg.seeds, "results": results})
    return {"success": results[-1]["success"], "malformed": results[-1]["malformed"]}


def evaluate(
    config: str, data_dir: str, data_md5: str, code_hash: str, parent: Input[Model], report: Output[Artifact]
) -> float:
    """KFP component: evaluate the chain."""
    from components.evaluate import work
    from harnessrl.stage import run_stage

    return run_stage("eval", work, config, data_dir, data_md5, parent.path, report.path)
