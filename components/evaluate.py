"""Stage 5, eval: every checkpoint of the chain on the same held-out tasks and seeds, in the harness.

The chain comes from the lineage manifests (final checkpoint -> parent -> ... -> base), so each
number lines up with a checkpoint id. Episodes run exactly as in production and in RL.
"""

from kfp.dsl import Artifact, Input, Model, Output

from harnessrl.config import EvalConfig
from harnessrl.data.build import read_jsonl
from harnessrl.io import write_json
from harnessrl.lineage.manifest import chain
from harnessrl.stage import StageContext


def episode_metrics(trajs: list) -> dict:
    """How the policy spends its tool budget, per episode, over a list of trajectories."""
    n, turns = len(trajs), sum(t.counts.turns for t in trajs)
    return {
        "success": sum(bool(t.outcome.success) for t in trajs) / n,
        "malformed": sum(t.counts.malformed_turns for t in trajs) / max(1, turns),
        "turns": turns / n,
        "tool_calls": sum(t.counts.tool_calls for t in trajs) / n,
        "parallel_share": sum(t.counts.parallel_turns for t in trajs) / max(1, turns),
        "clarify_rate": sum(t.counts.ask_user > 0 for t in trajs) / n,
        "tokens": sum(t.counts.tokens for t in trajs) / n,
        "wall_s": sum(t.wall_s for t in trajs) / n,
        "episodes": n,
    }


def evaluate_checkpoint(path, tasks: list, data_dir, cfg: EvalConfig, dtype: str) -> dict:
    # torch and transformers load here, not at import: building the DAG (compile, cached re-runs) stays fast.
    from harnessrl.engines.batched import LockstepBatcher
    from harnessrl.harness.episode import Budgets
    from harnessrl.model.checkpoint import load
    from harnessrl.tasks import run_task
    from harnessrl.tasks.run import BASE_UID

    model, tok = load(path, dtype)
    budgets = Budgets(max_turns=cfg.max_turns, max_tokens=cfg.max_turns * cfg.max_new_tokens)
    trajs = []
    for seed in cfg.seeds:
        batcher = LockstepBatcher(model, tok, cfg.temperature, cfg.max_new_tokens, seed=seed)
        trajs += batcher.run(
            tasks, lambda task, policy, slot: run_task(task, data_dir, policy, budgets, uid=BASE_UID + slot)
        )
    return episode_metrics(trajs)


def work(ctx: StageContext) -> dict:
    from harnessrl.tasks import Task

    cfg = EvalConfig.model_validate(ctx.cfg["stage"])
    tasks = [Task.model_validate(row["task"]) for row in read_jsonl(ctx.data_dir / "heldout.jsonl")]
    tasks = [t for t in tasks if t.suite in cfg.suites][: cfg.num_tasks]
    results = []
    for path, manifest in reversed(chain(ctx.parent)):
        m = evaluate_checkpoint(path, tasks, ctx.data_dir, cfg, ctx.cfg["model"]["dtype"])
        results.append({"stage": manifest["stage"], "checkpoint": manifest["id"], "path": str(path), **m})
        print(
            f"[eval] {manifest['stage']:<13} success {m['success']:.3f} malformed {m['malformed']:.3f} "
            f"turns {m['turns']:.2f}",
            flush=True,
        )
    write_json(ctx.out / "report.json", {"suites": cfg.suites, "seeds": cfg.seeds, "results": results})
    return {"success": results[-1]["success"], "malformed": results[-1]["malformed"]}


def evaluate(
    config: str, data_dir: str, data_md5: str, code_hash: str, parent: Input[Model], report: Output[Artifact]
) -> float:
    """KFP component: evaluate the chain."""
    from components.evaluate import work
    from harnessrl.stage import run_stage

    return run_stage("eval", work, config, data_dir, data_md5, parent.path, report.path)
