"""Stage 3, RL: policy gradients on whole episodes in the production harness, with shaped rewards.

The long-horizon stage (components/long_horizon_rl.py) is this same stage under its own config: the
harness it builds then manages the context, and the loop trains through the summaries.
"""

from kfp.dsl import Dataset, Input, Model, Output

from harnessrl.config import EngineConfig, RewardConfig, RLConfig
from harnessrl.data.build import read_jsonl
from harnessrl.stage import StageContext


def work(ctx: StageContext, config_cls: type[RLConfig] = RLConfig, tag: str = "rl") -> dict:
    # torch and transformers load here, not at import: building the DAG (compile, cached re-runs) stays fast.
    from harnessrl.engines.vllm import check_installed
    from harnessrl.harness import formats
    from harnessrl.harness.episode import BASE_UID
    from harnessrl.harness.spec import HarnessSpec, save_harness, tools_of
    from harnessrl.model.checkpoint import load, save
    from harnessrl.model.prompts import PromptRenderer
    from harnessrl.rl.loop import train_rl
    from harnessrl.rl.rollouts import LocalRollouts
    from harnessrl.rl.trainer import LocalTrainer, TrainerGroup
    from harnessrl.tasks.task import Task

    if "rayjob" in ctx.cfg:  # on a cluster, async: the fleet and this loop run as a RayJob on KubeRay
        from harnessrl.cluster import rayjob

        return rayjob.run(tag, ctx)
    cfg = config_cls.model_validate(ctx.cfg["stage"])
    engine = EngineConfig.model_validate(ctx.cfg["engine"])
    check_installed(engine.kind)
    dtype, seed = ctx.cfg["model"]["dtype"], ctx.cfg["seed"]
    model, tok = load(ctx.parent, dtype)
    # The KL anchor is the parent checkpoint itself, frozen: what SFT (or the stage before) taught.
    reference = load(ctx.parent, dtype)[0].eval() if cfg.kl_coef > 0 else None
    tasks = [Task.model_validate(row["task"]) for row in read_jsonl(ctx.data_dir / "prompts.jsonl")]
    tasks = [t for t in tasks if t.suite in cfg.mix]
    missing = sorted(set(cfg.mix) - {t.suite for t in tasks})
    if missing:
        raise ValueError(f"stages.{tag}.mix: no prompts of suite {missing[0]!r} in {ctx.data_dir / 'prompts.jsonl'}")
    budgets = cfg.budgets()
    tool_format = ctx.cfg["model"]["tool_format"]
    renderer = PromptRenderer(tok, model.config.max_position_embeddings, formats.load(tool_format))
    check_context(tasks, renderer, cfg, tag)
    if cfg.context.policy == "summarize":
        check_summaries(tasks, ctx.data_dir, renderer, cfg, tag)

    # Where episodes come from: a Ray fleet (async), or this process, sampling on vLLM or on the
    # trainer's own model (sync).
    if cfg.mode == "async":
        from harnessrl.rl.fleet import RayRollouts  # Ray loads only for async runs

        ray_dir = ctx.out.parent / ".ray"  # Ray's files next to the output, not in ~/.ray or /tmp/ray
        rollouts = RayRollouts(ctx.parent, tok, ctx.data_dir, cfg, budgets, ray_dir, engine, dtype, tag=tag,
                               placement_timeout_s=ctx.cfg["placement_timeout_s"], tool_format=tool_format)  # fmt: skip
    elif engine.kind == "vllm":  # the engine gets the trainer's weights after every step
        from harnessrl.engines.vllm import VLLMEngine

        vllm = VLLMEngine(ctx.parent, engine, dtype, cfg.temperature, seed)
        rollouts = LocalRollouts(vllm, renderer, ctx.data_dir, cfg.group_size, budgets, True, BASE_UID)
    else:  # the trainer's own model generates: nothing to sync
        from harnessrl.engines.hf import HFEngine

        hf = HFEngine(model, tok, cfg.temperature)
        rollouts = LocalRollouts(hf, renderer, ctx.data_dir, cfg.group_size, budgets, False, BASE_UID)
    try:
        # What updates the weights: this process's DeepSpeed engine, or DeepSpeed ranks as a Ray actor
        # group (async only: the fleet started Ray), whose rank 0's weights `model` mirrors.
        if cfg.trainer_world_size > 1:
            trainer = TrainerGroup(model, reference, cfg, tok.pad_token_id, seed)
        else:
            trainer = LocalTrainer(model, reference, cfg, tok.pad_token_id)
        try:
            reward = RewardConfig.model_validate(ctx.cfg["reward"])
            last = train_rl(model, tasks, cfg, reward, ctx.out, tag, seed, rollouts, trainer, ctx.state_dir)
        finally:
            trainer.close()
    finally:
        rollouts.close()  # the fleet's actors and Ray, or the vLLM engine, also when training fails
    save(model, tok, ctx.out)
    # The harness these weights were trained in, which `harnessrl agent` presents by default.
    spec = HarnessSpec.training(tools_of([t.tools for t in tasks]), budgets)
    save_harness(spec.model_copy(update={"tool_format": tool_format}), ctx.out)
    return {
        "reward": last["reward"],
        "success": last["success"],
        "malformed": last["malformed"],
        "steps": cfg.steps,
        "policy_version": last["policy_version"],
        "rollouts": type(rollouts).__name__,  # RayRollouts (async, on Ray) or LocalRollouts (sync)
        "trainer_ranks": trainer.world,
    }


def check_context(tasks: list, renderer, cfg: RLConfig, tag: str) -> None:
    """Refuse to start when an episode's opening (system prompt, tool schemas, task) cannot leave room
    for a turn: within the context budget and below the summary trigger, or the harness could only
    end every episode at once (a real model's template writes every tool's schema into the prompt)."""
    from harnessrl.harness.episode import prompt_messages
    from harnessrl.harness.protocol import render_tools
    from harnessrl.harness.tools import select

    task = max(tasks, key=lambda t: len(t.instruction) + len(t.tools))
    opening = renderer.count(prompt_messages(task), render_tools(select(task.tools)))
    turn = cfg.max_new_tokens
    # (what bounds the context, its size, the room one turn needs on top of the opening)
    limits = [("the model's context (max_position_embeddings)", renderer.context, turn)]
    if cfg.context.budget is not None:
        limits.append((f"stages.{tag}.context.budget", cfg.context.budget, turn))
    if cfg.context.policy == "summarize":  # at the trigger the policy must have had a turn to summarize
        limits.append((f"stages.{tag}.context.trigger", cfg.context.trigger, 1))
    for name, size, room in limits:
        if opening + room > size:
            needs = f" plus a turn of stages.{tag}.max_new_tokens={turn}" if room > 1 else ""
            raise ValueError(f"{name}: {size} tokens cannot hold the opening prompt of task {task.id} (system "
                             f"prompt, {len(task.tools)} tool schemas, task: {opening} tokens){needs}")  # fmt: skip


def check_summaries(tasks: list, data_dir, renderer, cfg: RLConfig, tag: str, sample: int = 8) -> None:
    """Refuse a context the expert cannot work in: its episodes of the first `sample` tasks of each
    suite in the mix, in the stage's harness and counted in the policy's own tokens, must succeed with
    every turn kept until they summarize. A budget too small for the summary cap once made the harness
    drop the first search result before any summary, so no policy could answer, while the expert,
    summarizing from private notes, still passed its sizing check (docs/lessons.md)."""
    from harnessrl.harness.episode import run_task
    from harnessrl.tasks.expert import Expert

    budgets = cfg.budgets()
    where = (f"stages.{tag}.context (budget {budgets.context.budget}, trigger {budgets.context.trigger}, "
             f"summary_max_tokens {budgets.context.summary_max_tokens})")  # fmt: skip
    for suite in sorted({t.suite for t in tasks}):
        for task in [t for t in tasks if t.suite == suite][:sample]:
            traj = run_task(task, data_dir, Expert(task), budgets, count_tokens=renderer.count)
            lost = [c for c in traj.compactions if c.kind == "truncate"]
            if lost:
                raise ValueError(f"{where}: the expert's episode of task {task.id} lost turns before its "
                                 f"summary ({lost[0].tokens_before} context tokens); raise the budget or lower "
                                 f"the trigger")  # fmt: skip
            if not traj.outcome.success:
                raise ValueError(f"{where}: the expert fails task {task.id} in this harness "
                                 f"(stop: {traj.outcome.stop_reason}); size the context for its episodes")  # fmt: skip


def rl(
    config: str, data: Input[Dataset], data_md5: str, code_hash: str, parent: Input[Model], checkpoint: Output[Model]
) -> float:
    """KFP component: RL in the harness."""
    from components.rl import work
    from harnessrl.stage import run_stage

    return run_stage("rl", work, config, data.path, data_md5, parent.path, checkpoint.path)
