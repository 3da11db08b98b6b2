"""Stage 5, eval: every checkpoint of the chain on the same held-out tasks and seeds, in the harness.

The chain comes from the lineage manifests (final checkpoint -> parent -> ... -> base), so each
number lines up with a checkpoint id. Episodes run exactly as in production and in RL. The report
(report.json, episodes.jsonl, report.md, report.html, plots) is written first; then the regression
gates judge each checkpoint against its parent, and a failed gate fails the stage with one line.
"""

from kfp.dsl import Artifact, Dataset, Input, Model, Output

from harnessrl.config import EngineConfig, EvalConfig
from harnessrl.lineage.manifest import chain
from harnessrl.stage import StageContext


def work(ctx: StageContext) -> dict:
    from harnessrl.engines.vllm import check_installed
    from harnessrl.report.build import build_report, checkpoint_result, incident_rows, training_rows
    from harnessrl.report.episodes import checkpoint_rows
    from harnessrl.report.gates import GateFailed, check_gates, failure_message
    from harnessrl.report.heldout import load_heldout
    from harnessrl.report.write import write_report

    cfg = EvalConfig.model_validate(ctx.cfg["stage"])
    engine = EngineConfig.model_validate(ctx.cfg["engine"])  # the engine RL rolled out with
    check_installed(engine.kind)
    tasks = load_heldout(ctx.data_dir, cfg.mix, cfg.num_tasks)
    lineage = list(reversed(chain(ctx.parent)))  # base first
    dtype = ctx.cfg["model"]["dtype"]
    fmt_name = ctx.cfg["model"]["tool_format"]  # every checkpoint of the chain writes the model's format
    results, episodes = [], []
    # One vLLM engine for the whole chain: every checkpoint has the base's architecture and tokenizer,
    # so each takes its turn by loading its weights in place, not by an engine start of its own.
    vllm = None
    if engine.kind == "vllm":
        from harnessrl.engines.vllm import VLLMEngine

        vllm = VLLMEngine(lineage[0][0], engine, dtype, cfg.temperature)
    try:
        for path, manifest in lineage:
            stage, ckpt = manifest["stage"], manifest["id"]
            rows = [
                {"stage": stage, "checkpoint": ckpt} | r
                for r in checkpoint_rows(path, tasks, ctx.data_dir, cfg, dtype, engine, vllm, tool_format=fmt_name)
            ]
            res = checkpoint_result(stage, ckpt, manifest.get("manifest_hash"), str(path), rows, cfg)
            results.append(res)
            episodes += rows
            print(
                f"[eval] {stage:<13} {ckpt[:12]} success {res['success']:.3f} malformed {res['malformed']:.3f} "
                f"turns {res['turns']:.2f} ({len(rows)} episodes)",
                flush=True,
            )
    finally:
        if vllm is not None:
            vllm.close()
    verdicts = check_gates(results, cfg.gates)
    chain_paths = [(m["stage"], str(p)) for p, m in lineage]
    training = training_rows(chain_paths)
    report = build_report(cfg, str(ctx.data_dir), results, episodes, training, verdicts, incident_rows(chain_paths))
    if cfg.long_horizon_tasks:
        report["long_horizon"] = long_horizon_comparison(lineage, ctx, cfg, engine)
    write_report(ctx.out, report, episodes)
    for v in verdicts:
        print(f"[eval] gate {'ok  ' if v['ok'] else 'FAIL'} {v['message']}", flush=True)
    if any(not v["ok"] for v in verdicts):
        # A failed stage leaves no output folder, so the report is kept beside the stage's state,
        # which a failed stage keeps (`harnessrl report RUN_DIR` finds it there).
        kept = write_report(ctx.state_dir / "report", report, episodes)
        raise GateFailed(failure_message(verdicts, str(kept / "report.html")))
    return {"success": results[-1]["success"], "malformed": results[-1]["malformed"]}


def long_horizon_comparison(lineage, ctx: StageContext, cfg: EvalConfig, engine: EngineConfig) -> dict:
    """Truncation, untrained and trained summaries on the held-out long-horizon tasks, in the
    long-horizon checkpoint's own harness (harnessrl/report/long_horizon.py)."""
    from harnessrl.harness.spec import load_harness
    from harnessrl.report.heldout import load_heldout
    from harnessrl.report.long_horizon import METHODS, compare

    at = next((i for i, (_, m) in enumerate(lineage) if m["stage"] == "long_horizon"), None)
    if not at:  # the config check keeps the stage in the chain; a chain that lacks it is a broken one
        raise ValueError("stages.eval.long_horizon_tasks: the chain has no long_horizon checkpoint with a parent")
    (parent, _), (trained, _) = lineage[at - 1], lineage[at]
    harness = load_harness(trained)
    if harness is None:
        raise ValueError(f"{trained}: the long-horizon checkpoint records no harness.json")
    tasks = load_heldout(ctx.data_dir, {"long_horizon": 1.0}, cfg.long_horizon_tasks)
    out = compare(parent, trained, harness.budgets, tasks, ctx.data_dir, cfg, ctx.cfg["model"]["dtype"], engine)
    for method in METHODS:
        m = out[method]
        print(f"[eval] long-horizon {method:<17} success {m['success']['value']:.3f} summary tokens "
              f"{m['summary_tokens']:.1f} compactions {m['compactions']:.2f} ended {m['ended']}", flush=True)  # fmt: skip
    return out


def evaluate(
    config: str, data: Input[Dataset], data_md5: str, code_hash: str, parent: Input[Model], report: Output[Artifact]
) -> float:
    """KFP component: evaluate the chain."""
    from components.evaluate import work
    from harnessrl.stage import run_stage

    return run_stage("eval", work, config, data.path, data_md5, parent.path, report.path)
