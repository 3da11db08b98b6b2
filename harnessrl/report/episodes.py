"""Running held-out episodes, one compact row each: a local checkpoint through the lockstep batcher
(as RL rolls out), a served model through the OpenAI-compatible client. Either way the episode is
the production harness's `run_task`, so the two are benchmarked by the same code.

Episodes run seed by seed; within a seed every task runs once. The rows say which task and seed
they are, so runs line up episode by episode (for paired comparisons between checkpoints).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harnessrl.config import EngineConfig, EvalConfig
from harnessrl.report.metrics import episode_row
from harnessrl.tasks.task import Task


def _budgets(cfg: EvalConfig):
    from harnessrl.harness.episode import Budgets

    return Budgets(max_turns=cfg.max_turns, max_tokens=cfg.max_turns * cfg.max_new_tokens)


def checkpoint_rows(
    path: Path | str, tasks: list[Task], data_dir: Path, cfg: EvalConfig, dtype: str, engine: EngineConfig | None = None
) -> list[dict]:
    """Every task under every seed with a local HF checkpoint, batched one generate per turn, on the
    `hf` engine (the default) or on vLLM (`engine.kind == "vllm"`), as RL rolls out."""
    # torch and transformers load here, not at import: building the DAG (compile, cached re-runs) stays fast.
    from harnessrl.engines.batched import LockstepBatcher
    from harnessrl.model.checkpoint import load
    from harnessrl.tasks import run_task
    from harnessrl.tasks.run import BASE_UID

    model, tok = load(path, dtype)  # the batcher renders prompts with its tokenizer and context
    vllm = None
    if engine is not None and engine.kind == "vllm":
        from harnessrl.engines.vllm import VLLMEngine

        vllm = VLLMEngine(path, engine, dtype, cfg.temperature)
    budgets = _budgets(cfg)
    rows: list[dict[str, Any]] = []
    try:
        for seed in cfg.seeds:
            generate_fn = vllm.generate if vllm else None
            batcher = LockstepBatcher(model, tok, cfg.temperature, cfg.max_new_tokens, seed, generate_fn)
            trajs = batcher.run(
                tasks, lambda task, policy, slot: run_task(task, data_dir, policy, budgets, uid=BASE_UID + slot)
            )
            rows += [episode_row(tr, t.suite, seed) for tr, t in zip(trajs, tasks, strict=True)]
    finally:
        if vllm:
            vllm.close()
    return rows


def endpoint_rows(
    url: str,
    model: str,
    tasks: list[Task],
    data_dir: Path,
    cfg: EvalConfig,
    token_ids: bool = True,
    workers: int = 4,
    api_key: str | None = None,
) -> list[dict]:
    """Every task under every seed with a served model; `workers` episodes in flight at once."""
    from harnessrl.engines.openai_client import ChatEndpointPolicy
    from harnessrl.tasks import run_tasks

    index = {t.id: i for i, t in enumerate(tasks)}
    rows: list[dict[str, Any]] = []
    for seed in cfg.seeds:
        # Each episode its own policy and seed stream, so the numbers do not depend on scheduling.
        policy_for = lambda task, seed=seed: ChatEndpointPolicy(
            url,
            model,
            cfg.temperature,
            cfg.max_new_tokens,
            seed=seed * 100_003 + index[task.id],
            token_ids=token_ids,
            api_key=api_key,
        )
        trajs = run_tasks(tasks, data_dir, policy_for, workers=workers, budgets=_budgets(cfg))
        rows += [episode_row(tr, t.suite, seed) for tr, t in zip(trajs, tasks, strict=True)]
    return rows
