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


def checkpoint_trajectories(
    path: Path | str,
    tasks: list[Task],
    data_dir: Path,
    cfg: EvalConfig,
    dtype: str,
    engine: EngineConfig | None = None,
    budgets=None,
    vllm=None,
    tool_format: str | None = None,
) -> list[tuple[int, Task, Any]]:
    """(seed, task, trajectory) for every task under every seed with a local HF checkpoint, batched one
    generate per turn, on the `hf` engine (the default) or on vLLM (`engine.kind == "vllm"`), as RL
    rolls out. `budgets` defaults to the eval's own (EvalConfig.budgets). A running VLLMEngine given as
    `vllm` takes the checkpoint's weights in place and stays open; otherwise one is started and closed.
    Turns are read in `tool_format`, by default the one the checkpoint's harness.json records."""
    # torch and transformers load here, not at import: building the DAG (compile, cached re-runs) stays fast.
    from harnessrl.harness import formats
    from harnessrl.harness.episode import BASE_UID
    from harnessrl.harness.spec import load_harness
    from harnessrl.model.checkpoint import load
    from harnessrl.model.prompts import PromptRenderer
    from harnessrl.rl.rollouts import run_group

    model, tok = load(path, dtype)
    spec = load_harness(path)
    fmt = formats.load(tool_format) if tool_format else spec.fmt if spec else formats.hermes
    renderer = PromptRenderer(tok, model.config.max_position_embeddings, fmt)
    own = vllm is None  # an engine this call starts, so closes
    if engine is not None and engine.kind == "vllm":
        from harnessrl.engines.vllm import VLLMEngine

        sampler = VLLMEngine(path, engine, dtype, cfg.temperature) if own else vllm
        if not own:
            sampler.load_folder(path)
    else:
        from harnessrl.engines.hf import HFEngine

        sampler = HFEngine(model, tok, cfg.temperature)
    budgets = budgets or cfg.budgets()
    uids = range(BASE_UID, BASE_UID + len(tasks))
    out = []
    try:
        for seed in cfg.seeds:
            trajs, _ = run_group(tasks, data_dir, budgets, renderer, sampler.generate, seed, uids)
            out += [(seed, t, tr) for t, tr in zip(tasks, trajs, strict=True)]
    finally:
        if engine is not None and engine.kind == "vllm" and own:
            sampler.close()
    return out


def checkpoint_rows(
    path: Path | str,
    tasks: list[Task],
    data_dir: Path,
    cfg: EvalConfig,
    dtype: str,
    engine: EngineConfig | None = None,
    vllm=None,
    tool_format: str | None = None,
) -> list[dict]:
    """checkpoint_trajectories as one compact row per episode."""
    runs = checkpoint_trajectories(path, tasks, data_dir, cfg, dtype, engine, vllm=vllm, tool_format=tool_format)
    return [episode_row(tr, t, seed) for seed, t, tr in runs]


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
    from harnessrl.harness.episode import run_tasks

    index = {t.id: i for i, t in enumerate(tasks)}
    rows: list[dict[str, Any]] = []
    for seed in cfg.seeds:
        # Each episode its own policy and seed stream, so the numbers do not depend on scheduling.
        policy_for = lambda task, seed=seed: ChatEndpointPolicy(
            url,
            model,
            cfg.temperature,
            seed=seed * 100_003 + index[task.id],
            token_ids=token_ids,
            api_key=api_key,
        )
        trajs = run_tasks(tasks, data_dir, policy_for, workers=workers, budgets=cfg.budgets())
        rows += [episode_row(tr, t, seed) for tr, t in zip(trajs, tasks, strict=True)]
    return rows
