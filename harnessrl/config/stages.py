"""The chain's stages: CPT and SFT (TrainConfig), RL and long-horizon RL, and eval with its gates."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from harnessrl.config.base import Strict
from harnessrl.config.harness import Budgets, ContextConfig, episode_budgets

# The chain, in order. `base` builds or loads the model the chain starts from.
STAGES = ("base", "cpt", "sft", "rl", "long_horizon", "eval")


def _active(mix: dict[str, float]) -> dict[str, float]:
    # Weight 0 turns a suite off: Hydra merges dicts key by key, so a recipe that inherits another's
    # mix can drop a suite only by zeroing it. What is left must name a suite.
    active = {suite: weight for suite, weight in mix.items() if weight > 0}
    if not active:
        raise ValueError("a mix needs at least one suite with a weight above 0")
    return active


# suite -> weight: how a stage's tasks or conversations are shared among the data's suites.
Mix = Annotated[dict[str, Annotated[float, Field(ge=0)]], AfterValidator(_active)]


def shares(mix: dict[str, float], total: int) -> dict[str, int]:
    """`total` split among the suites by weight (largest remainders; each suite at least one)."""
    norm = sum(mix.values())
    exact = {s: total * w / norm for s, w in mix.items()}
    counts = {s: max(1, int(x)) for s, x in exact.items()}
    for s in sorted(mix, key=lambda s: int(exact[s]) - exact[s])[: max(0, total - sum(counts.values()))]:
        counts[s] += 1
    return counts


class TrainConfig(Strict):
    """A supervised stage: CPT on packed code, SFT on tool-call conversations."""

    enabled: bool = True
    steps: int = Field(gt=0)
    micro_batch_size: int = Field(gt=0)
    grad_accum: int = Field(1, gt=0)
    seq_len: int = Field(gt=8)
    lr: float = Field(gt=0, le=1)
    embed_lr: float | None = Field(
        None,
        gt=0,
        le=1,
        description="learning rate of the token embeddings (and a tied output projection); None: lr. An "
        "imported model's tool-call tags start as new rows, which SFT at a fine-tuning lr barely moves",
    )
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    warmup_steps: int = Field(0, ge=0)
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    zero_stage: int = Field(0, ge=0, le=3)
    precision: Literal["fp32", "bf16"] = "fp32"
    world_size: int = Field(1, gt=0, description="training processes (GPUs on a cluster)")
    mix: Mix | None = Field(
        None,
        description="SFT: suite -> weight, the share of each suite's conversations in an epoch (resampled "
        "to the data's count); None: every conversation once an epoch",
    )
    length_buckets: list[int] = Field(
        [],
        description="SFT: token lengths that split conversations into buckets; a batch comes from one bucket, "
        "so short conversations are not padded to long ones ([]: one bucket)",
    )
    log_every: int = Field(10, gt=0)
    checkpoint_every: int = Field(0, ge=0, description="save a resumable state every N steps; 0: never")

    @model_validator(mode="after")
    def _buckets_ascend(self) -> TrainConfig:
        if any(b <= 0 for b in self.length_buckets) or self.length_buckets != sorted(set(self.length_buckets)):
            raise ValueError(f"length_buckets must be positive and ascending (got {self.length_buckets})")
        return self


class MonitorConfig(Strict):
    """Reward-hacking alarms (harnessrl/rewards/monitors.py), every threshold in one place. Each monitor
    judges episodes, and each threshold is a share of episodes, per suite and overall, pooled over the
    last `window` steps. A share above its threshold alarms only when it is also clearly above the share
    of the stage's own first `warmup_steps` steps: unlikely at the start's rate (one-sided binomial test
    at `alpha`) and at least `min_rise` above it. So a level the parent checkpoint brought is reported,
    not alarmed, and so is a small rise near the floor (0.97 to 1.0 over many episodes is significant,
    not a new behaviour). check_tamper alarms on its threshold alone. None disables a monitor."""

    malformed_max: float | None = Field(0.5, ge=0, le=1, description="share of episodes with a malformed call")
    clarify_max: float | None = Field(
        0.3, ge=0, le=1, description="share of episodes with a clarifying question the task did not need"
    )
    edit_max: float | None = Field(
        None, ge=0, le=1, description="share of episodes with more than 3 edit_file/write_file calls"
    )
    check_tamper_max: float | None = Field(
        0.0,
        ge=0,
        le=1,
        description="share of episodes that changed a test file, test or lint config, or added a noqa comment",
    )
    unsupported_answer_max: float | None = Field(
        0.9, ge=0, le=1, description="share of answered episodes whose answer appears in no tool output"
    )
    drift_max: float | None = Field(
        1.0, ge=0, description="largest move of a reward component's step mean from its mean over the first steps"
    )
    drift_window: int = Field(3, ge=1, description="how many first steps make the drift baseline")
    warmup_steps: int = Field(
        3, ge=0, description="the first steps: no alarms, and the share each alarm must clearly exceed (0: none)"
    )
    window: int = Field(3, ge=1, description="steps pooled into the share a threshold judges")
    alpha: float = Field(
        0.01, gt=0, le=1, description="how unlikely the share must be at the first steps' rate to alarm"
    )
    min_rise: float = Field(
        0.1, ge=0, le=1, description="the least rise of the share over the first steps' share that alarms"
    )
    stop_on_alarm: bool = Field(False, description="an alarm stops the run (HackAlarm)")


class Placement(Strict):
    """Where the async fleet's actors run: the Ray resources each asks for. On KubeRay each worker
    group advertises a custom resource of its own (harnessrl/cluster/rayjob.py), so an actor that asks
    for it lands in that group's node pool. "GPU" and "CPU" are Ray's own resources."""

    rollout: dict[str, float] = Field({}, description="per rollout worker, e.g. {rollout: 1, GPU: 1}")
    env: dict[str, float] = Field({}, description="per environment worker, e.g. {env: 1}")
    trainer: dict[str, float] = Field(
        {}, description="per trainer rank (trainer_world_size > 1), e.g. {trainer: 1, GPU: 1}"
    )

    @field_validator("rollout", "env", "trainer", mode="before")
    @classmethod
    def _none_clears(cls, value: object) -> object:
        # Hydra merges dicts, so `placement.rollout={}` would keep the recipe's keys; `=none` replaces.
        return {} if value is None or value == "none" else value


class RLConfig(Strict):
    """Policy-gradient RL in the harness (GRPO family)."""

    enabled: bool = True
    steps: int = Field(gt=0)
    prompts_per_step: int = Field(gt=0)
    group_size: int = Field(ge=2, description="rollouts per prompt, for group-relative advantages")
    max_new_tokens: int = Field(gt=0, description="per assistant turn")
    max_turns: int = Field(4, gt=0, description="per episode")
    temperature: float = Field(1.0, gt=0)
    lr: float = Field(gt=0, le=1)
    grad_clip: float = Field(1.0, gt=0)
    clip_low: float = Field(0.2, gt=0, lt=1)
    clip_high: float = Field(0.28, gt=0, description="DAPO clip-higher; = clip_low for plain PPO clipping")
    normalization: Literal["grpo", "dr_grpo"] = Field(
        "grpo", description="grpo: advantages / group std, loss mean over tokens; dr_grpo: neither"
    )
    tis_cap: float | None = Field(
        2.0, gt=0, description="truncation of the trainer/engine importance weight; None: no IS correction"
    )
    minibatches: int = Field(1, gt=0, description="optimizer steps per RL step, over a split of its samples")
    kl_coef: float = Field(0.0, ge=0, description="weight of a k3 KL penalty to the frozen parent checkpoint")
    max_staleness: int = Field(1, ge=0, description="async only: max policy versions between rollout and update")
    refill_groups: int = Field(
        0,
        ge=0,
        description="dynamic sampling (DAPO): while fewer than prompts_per_step groups differ in reward, "
        "draw up to this many more groups per step; 0: off",
    )
    curriculum: Literal["uniform", "pass_rate"] = Field(
        "uniform", description="how prompts are drawn: uniformly, or weighted by p(1-p) of their running success rate"
    )
    mode: Literal["async", "sync"] = Field(
        "sync", description="sync: one process generates and trains in turn; async: a Ray fleet of workers"
    )
    rollout_workers: int = Field(1, gt=0, description="async only: Ray actors that generate (vLLM or hf)")
    env_workers: int = Field(1, gt=0, description="async only: Ray actors that run episodes in sandboxes")
    trainer_world_size: int = Field(
        1, gt=0, description="DeepSpeed ranks of the RL trainer; above 1 a Ray actor group (async mode)"
    )
    placement: Placement = Field(default_factory=Placement, description="async only: where the actors run")
    zero_stage: int = Field(0, ge=0, le=3, description="DeepSpeed ZeRO stage of the RL trainer")
    activation_checkpointing: bool = Field(
        False,
        description="recompute each layer's activations in the backward pass instead of keeping them: the "
        "update's memory no longer grows with every token of the step's episodes (bench/rl_memory.py: "
        "0.35x the peak on SmolLM2-135M, in 0.97x the time on CPU)",
    )
    checkpoint_every: int = Field(10, gt=0, description="save a resumable state every N steps")
    monitors: MonitorConfig = Field(default_factory=MonitorConfig, description="reward-hacking alarms")
    mix: Mix = Field(
        {"lookup": 1.0}, description="suite -> weight: the share of the prompts drawn from each suite of the data"
    )
    baseline: Literal["group", "batch"] = Field(
        "group",
        description="what a reward is compared with: its group's mean (GRPO), or the whole step's (one "
        "baseline for every prompt, as REINFORCE with a batch mean); normalization divides by the same set's std",
    )
    overlong_mask: bool = Field(
        False,
        description="no gradient for an episode that ran out of a budget (turns, tokens, context, summaries) "
        "instead of answering: SUPO's overlong masking",
    )
    context: ContextConfig = Field(
        default_factory=ContextConfig, description="what the harness does when an episode's context fills up"
    )
    train_summaries: bool = Field(
        True,
        description="false: summary turns get no gradient, while the rest of each episode trains as before "
        "(the control that isolates what training the summaries themselves adds)",
    )

    def budgets(self) -> Budgets:
        """The harness's budgets for this stage's episodes."""
        return episode_budgets(self.max_turns, self.max_new_tokens, self.context)

    @field_validator("placement", mode="before")
    @classmethod
    def _none_clears(cls, value: object) -> object:
        # `stages.rl.placement=none` (or null): every actor anywhere, whatever the recipe placed.
        return {} if value is None or value == "none" else value

    @model_validator(mode="after")
    def _every_setting_takes_effect(self) -> RLConfig:
        # A field that would be ignored is refused, so a recipe runs the way it reads.
        if self.mode == "sync":
            # A sync run has no Ray workers, and each step trains on rollouts of the weights it has.
            async_only = ("rollout_workers", "env_workers", "trainer_world_size", "max_staleness")
            fields = type(self).model_fields
            idle = [f"{f}={getattr(self, f)}" for f in async_only if getattr(self, f) != fields[f].default]
            idle += [f"placement.{k}" for k, v in self.placement.model_dump().items() if v]
            if idle:
                raise ValueError(f"{' and '.join(idle)} take effect only in mode async (a sync run has no Ray "
                                 "workers and no stale rollouts): set mode: async, or leave them at their "
                                 "defaults")  # fmt: skip
        if not self.train_summaries and self.context.policy != "summarize":
            raise ValueError(f"train_summaries=false masks summary turns, which context policy "
                             f"{self.context.policy!r} never asks for; set context.policy: summarize or remove it")  # fmt: skip
        if self.placement.trainer and self.trainer_world_size == 1:
            raise ValueError("placement.trainer places trainer ranks, which only trainer_world_size > 1 has (one "
                             "rank trains in the driver); remove it or raise trainer_world_size")  # fmt: skip
        if self.trainer_world_size > 1 and self.zero_stage == 3:
            raise ValueError(f"trainer_world_size={self.trainer_world_size} with zero_stage=3: the ranks' weights "
                             "reach the rollout engines whole, which ZeRO-3's shards are not; use zero_stage 0-2")  # fmt: skip
        return self


class LongHorizonConfig(RLConfig):
    """RL with self-summarization: the policy compacts its own context at a token trigger. The same
    stage as RL under its own config: its `context` is set, and the loop trains through the summaries."""

    mix: Mix = Field({"long_horizon": 1.0})
    # A long-horizon task asks for several facts, each a search, with summaries between: more turns
    # than RL's lookups. An episode that runs out of context or summaries is what this stage trains
    # against, so by default it gets no gradient rather than a reward for stopping early (SUPO).
    max_turns: int = Field(8, gt=0, description="per episode")
    overlong_mask: bool = Field(
        True, description="no gradient for an episode that ran out of a budget instead of answering"
    )
    context: ContextConfig = Field(
        description="what the harness does when the context fills: the recipe sizes it for its model"
    )


# What an eval measures per suite (harnessrl/report/metrics.py computes them; a test keeps the two equal).
EVAL_METRICS = (
    "success",
    "pass_at_k",
    "turns",
    "tool_calls",
    "parallel_share",
    "malformed",
    "clarify_rate",
    "tokens",
    "wall_s",
)


class GateConfig(Strict):
    """Fail eval when a checkpoint is worse than its parent on `metric` by more than `tolerance`."""

    metric: Literal[EVAL_METRICS] = Field(description="an eval metric, e.g. success or malformed")
    higher_is_better: bool | None = Field(None, description="None: the metric's own direction")
    tolerance: float = Field(0.0, ge=0, description="absolute slack, in the metric's units")
    stages: list[Literal["cpt", "sft", "rl", "long_horizon", "live"]] = Field(
        [], description="the checkpoints (by stage) the gate judges against their parents; []: all"
    )
    suite: str | None = Field(None, description="one suite, or None: each suite on its own")


class EvalConfig(Strict):
    enabled: bool = True
    mix: Mix = Field(description="suite -> weight: num_tasks held-out tasks are split among the suites by weight")
    seeds: list[int] = Field(min_length=1)
    num_tasks: int = Field(gt=0, description="held-out tasks per suite")
    max_new_tokens: int = Field(gt=0, description="per assistant turn")
    max_turns: int = Field(4, gt=0, description="per episode")
    temperature: float = Field(0.0, ge=0, description="0: greedy")
    gates: list[GateConfig] = Field([])
    long_horizon_tasks: int = Field(
        0,
        ge=0,
        description="held-out long-horizon tasks on which truncation, untrained and trained summaries are "
        "compared, in the long-horizon checkpoint's harness (0: no comparison)",
    )

    def budgets(self, context: ContextConfig | None = None) -> Budgets:
        """The eval's harness budgets, under a context policy where one is compared."""
        return episode_budgets(self.max_turns, self.max_new_tokens, context)


class StagesConfig(Strict):
    cpt: TrainConfig
    sft: TrainConfig
    rl: RLConfig
    long_horizon: LongHorizonConfig
    eval: EvalConfig
