"""Typed config: the Hydra tree in conf/ composes, these pydantic models validate.

Every field of a recipe is declared here, once. Hydra gives composition and overrides;
pydantic gives types, ranges and `extra="forbid"`, so a typo is an error, never a silent no-op.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

# The chain, in order. `base` builds or loads the model the chain starts from.
STAGES = ("base", "cpt", "sft", "rl", "long_horizon", "eval")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ----------------------------------------------------------------------------- model


class ArchConfig(Strict):
    """A Llama-architecture model built from scratch (random init) from these dimensions.

    Not Qwen2: transformers (and so vLLM) load every `qwen2` checkpoint with Qwen2Tokenizer, which
    replaces the trained tokenizer's pre-tokenizer with Qwen's own. Train and serve would split text
    differently. A Llama checkpoint's tokenizer loads exactly as tokenizer.json has it."""

    vocab_size: int = Field(ge=300, description="BPE vocab incl. 256 bytes and special tokens")
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    max_position_embeddings: int = Field(gt=0)
    tie_word_embeddings: bool = True

    @model_validator(mode="after")
    def _heads_divide(self) -> ArchConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError("hidden_size must be divisible by num_heads")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be divisible by num_kv_heads")
        return self


class ModelConfig(Strict):
    name: str
    path: str | None = Field(None, description="local Hugging Face model directory; never a hub id")
    arch: ArchConfig | None = Field(None, description="dimensions of a model trained from scratch")
    dtype: Literal["float32", "bfloat16"] = "float32"

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if (self.path is None) == (self.arch is None):
            raise ValueError("set exactly one of model.path (a local HF directory) or model.arch")
        return self


# ----------------------------------------------------------------------------- data


class LongHorizonDataConfig(Strict):
    """The long-horizon suite's share of the data folder (harnessrl/tasks/long_horizon.py)."""

    num_sft: int = Field(0, ge=0, description="expert conversations for SFT, each one row per context segment")
    num_prompts: int = Field(0, ge=0, description="RL prompts")
    num_heldout: int = Field(0, ge=0, description="held-out eval prompts")
    tasks_per_repo: int = Field(4, gt=0)
    facts_min: int = Field(3, ge=2, description="constants a task asks for, at least")
    facts_max: int = Field(3, ge=2, description="constants a task asks for, at most")
    verbose_share: float = Field(
        0.7, ge=0, le=1, description="share of the expert's conversations whose summaries restate whole search results"
    )
    trigger: int = Field(
        95, gt=0, description="the expert's summary trigger, in its estimated tokens (4 characters each)"
    )
    max_summaries: int = Field(2, ge=0, description="the expert's harness: summaries per episode")
    max_turns: int = Field(8, gt=0, description="the expert's harness: turns per episode")

    @model_validator(mode="after")
    def _facts_range(self) -> LongHorizonDataConfig:
        if self.facts_min > self.facts_max:
            raise ValueError("facts_min must not exceed facts_max")
        return self


class DataConfig(Strict):
    name: str
    dir: str = Field(
        description="where data folders live, relative to the repo root or absolute: each data config "
        "gets its own subfolder `<name>-<config hash>`, tracked by DVC through `<subfolder>.dvc` next to it"
    )
    seed: int = 0
    num_repos: int = Field(gt=0, description="generated Python repos in the code corpus")
    files_per_repo: int = Field(gt=0)
    num_sft: int = Field(gt=0, description="tool-call conversations for SFT")
    num_prompts: int = Field(gt=0, description="RL prompts")
    num_heldout: int = Field(gt=0, description="held-out eval prompts")
    guess_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="share of 'what is the value' SFT conversations where the teacher answers 0 without "
        "looking (always wrong): an imperfect expert, as real ones are, whose habit SFT copies and only "
        "RL's outcome reward can correct",
    )
    long_horizon: LongHorizonDataConfig = Field(default_factory=LongHorizonDataConfig)


# ----------------------------------------------------------------------------- stages


class TrainConfig(Strict):
    """A supervised stage: CPT on packed code, SFT on tool-call conversations."""

    enabled: bool = True
    steps: int = Field(gt=0)
    micro_batch_size: int = Field(gt=0)
    grad_accum: int = Field(1, gt=0)
    seq_len: int = Field(gt=8)
    lr: float = Field(gt=0, le=1)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    warmup_steps: int = Field(0, ge=0)
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    zero_stage: int = Field(0, ge=0, le=3)
    precision: Literal["fp32", "bf16"] = "fp32"
    world_size: int = Field(1, gt=0, description="training processes (GPUs on a cluster)")
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


class ContextConfig(Strict):
    """What the harness does when an episode's context fills up (harnessrl/harness/context.py)."""

    policy: Literal["none", "truncate", "summarize"] = "none"
    budget: int | None = Field(None, gt=0, description="context tokens the policy may hold; None: no cap")
    trigger: int | None = Field(None, gt=0, description="summarize: context tokens at which the policy summarizes")
    summary_max_tokens: int = Field(256, gt=0, description="summarize: the cap on one summary turn")
    max_summaries: int = Field(3, ge=0, description="summarize: compactions per episode; one more ends it")

    @model_validator(mode="after")
    def _complete(self) -> ContextConfig:
        if self.policy != "none" and self.budget is None:
            raise ValueError(f"context policy {self.policy!r} needs a budget")
        if self.policy == "summarize":
            if self.trigger is None:
                raise ValueError("context policy 'summarize' needs a trigger")
            if self.trigger + self.summary_max_tokens > self.budget:  # type: ignore[operator]
                raise ValueError("trigger + summary_max_tokens must fit in the budget (the summary turn must fit)")
        return self

    @property
    def counts_tokens(self) -> bool:
        """Whether the harness must count the context before each turn."""
        return self.policy != "none" or self.budget is not None


class Budgets(Strict):
    """What bounds an episode (harnessrl/harness/episode.py). Three token budgets, each named, each its
    own stop reason: the per-turn cap (a turn that hits it is marked `capped`), the episode's generated
    tokens, and the context the policy may hold (`context.budget`, with the policy that manages it).
    The defaults are the production harness's (`harnessrl agent`); a stage derives its own from its
    config (`episode_budgets`)."""

    max_turns: int = Field(30, gt=0)  # assistant turns; summaries are counted apart (context.max_summaries)
    max_turn_tokens: int = Field(1024, gt=0)  # the per-turn cap
    max_tokens: int = Field(32768, gt=0)  # generated over the episode (len(text)//4 when no token ids)
    wall_s: float = 900.0  # checked between turns; commands are also cut off at the deadline
    max_calls_per_turn: int = 8
    max_parallel: int = 8  # threads running one turn's calls
    context: ContextConfig = ContextConfig()


def episode_budgets(max_turns: int, max_new_tokens: int, context: ContextConfig | None = None) -> Budgets:
    """A stage's harness budgets: its turns, its per-turn cap, and a whole episode's worth of tokens."""
    return Budgets(max_turns=max_turns, max_turn_tokens=max_new_tokens, max_tokens=max_turns * max_new_tokens,
                   context=context or ContextConfig())  # fmt: skip


class MonitorConfig(Strict):
    """Reward-hacking alarms (harnessrl/rewards/monitors.py): thresholds on per-step rates; None disables one."""

    malformed_max: float | None = Field(0.5, ge=0, le=1, description="share of a step's turns that were malformed")
    clarify_max: float | None = Field(
        0.3, ge=0, description="clarifying questions beyond what the task needs, per episode"
    )
    edit_max: float | None = Field(None, ge=0, description="edit_file/write_file calls per episode")
    test_tamper_max: float | None = Field(
        0.0, ge=0, le=1, description="share of episodes that edited, wrote, moved or removed a test file"
    )
    unsupported_answer_max: float | None = Field(
        0.5, ge=0, le=1, description="share of answered episodes whose answer appears in no tool output"
    )
    drift_max: float | None = Field(
        1.0, ge=0, description="largest move of a reward component's step mean from its mean over the first steps"
    )
    drift_window: int = Field(3, ge=1, description="how many first steps make the drift baseline")
    warmup_steps: int = Field(0, ge=0, description="no alarms at steps below this")
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


class RLConfig(Strict):
    """Policy-gradient RL in the harness (GRPO family)."""

    enabled: bool = True
    steps: int = Field(gt=0)
    prompts_per_step: int = Field(gt=0)
    group_size: int = Field(ge=2, description="rollouts per prompt, for group-relative advantages")
    max_new_tokens: int = Field(gt=0, description="per assistant turn")
    max_turns: int = Field(6, gt=0, description="per episode")
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
    max_staleness: int = Field(1, ge=0, description="max policy versions between rollout and update")
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
    checkpoint_every: int = Field(10, gt=0, description="save a resumable state every N steps")
    monitors: MonitorConfig = Field(default_factory=MonitorConfig, description="reward-hacking alarms")
    suites: list[str] = Field(["lookup"], min_length=1, description="the suites of the data's prompts it trains on")
    overlong_mask: bool = Field(
        False,
        description="no gradient for an episode that ran out of a budget (turns, tokens, context, summaries) "
        "instead of answering: SUPO's overlong masking",
    )
    context: ContextConfig = Field(
        default_factory=ContextConfig, description="what the harness does when an episode's context fills up"
    )

    def budgets(self) -> Budgets:
        """The harness's budgets for this stage's episodes."""
        return episode_budgets(self.max_turns, self.max_new_tokens, self.context)

    @model_validator(mode="after")
    def _every_setting_takes_effect(self) -> RLConfig:
        # A field that would be ignored is refused, so a recipe runs the way it reads.
        if self.mode == "sync":
            fields = ("rollout_workers", "env_workers", "trainer_world_size")
            idle = [f"{f}={getattr(self, f)}" for f in fields if getattr(self, f) > 1]
            idle += [f"placement.{k}" for k, v in self.placement.model_dump().items() if v]
            if idle:
                raise ValueError(f"{' and '.join(idle)} take effect only in mode async (a sync run has no Ray "
                                 "workers): set mode: async, or leave them at their defaults")  # fmt: skip
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

    suites: list[str] = Field(["long_horizon"], min_length=1)


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
    suites: list[str] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    num_tasks: int = Field(gt=0, description="held-out tasks per suite")
    max_new_tokens: int = Field(gt=0, description="per assistant turn")
    max_turns: int = Field(6, gt=0, description="per episode")
    temperature: float = Field(0.0, ge=0, description="0: greedy")
    gates: list[GateConfig] = []
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


# ----------------------------------------------------------------------------- reward, engine


class LiveRewardConfig(Strict):
    """Weights of the production signals (harnessrl/live/feedback.py), each a named reward component of
    a served session. The logged turns' malformed calls and clarifying questions are charged with the
    simulated rewards' own `malformed` and `clarify` weights."""

    edit_kept: float = Field(1.0, ge=0, description="per edit still in the repository when checked")
    edit_reverted: float = Field(-1.0, le=0, description="per edit the user undid")
    accepted: float = Field(0.75, ge=0, description="per suggestion or answer accepted (Tab: +0.75)")
    rejected: float = Field(-0.25, le=0, description="per suggestion or answer rejected (Tab: -0.25)")
    dissatisfied: float = Field(-0.5, le=0, description="per dissatisfied follow-up")
    latency: float = Field(-0.05, le=0, description="per second of latency the client reported")


class RewardConfig(Strict):
    """Weights of the named reward components; each is logged per trajectory."""

    outcome: float = 1.0
    malformed: float = Field(-1.0, le=0, description="per malformed turn: an explicit negative")
    turns: float = Field(-0.02, le=0, description="per turn of a solved task")
    tokens: float = Field(0.0, le=0, description="per 1k generated tokens of a solved task")
    parallel: float = Field(0.05, ge=0, description="per turn with independent calls run in parallel, of a solved task")
    clarify: float = Field(-0.1, le=0, description="per clarifying question beyond what the task needs")
    summary_tokens: float = Field(0.0, le=0, description="per 1k tokens of self-summaries, of a solved task")
    overlong: float = Field(0.0, le=0, description="per episode that ran out of a budget instead of answering")
    live: LiveRewardConfig = Field(default_factory=LiveRewardConfig, description="real-time RL's signals")


class LiveMonitorConfig(Strict):
    """Real-time RL's hack alarms, judged on each cycle's sessions (harnessrl/live/monitors.py). Real
    users reward what they like, so a hack shows as reward flowing to behaviour the harness calls bad."""

    malformed_max: float | None = Field(0.2, ge=0, le=1, description="share of a cycle's turns that were malformed")
    clarify_max: float | None = Field(0.5, ge=0, description="clarifying questions per session")
    rewarded_gap: float | None = Field(
        0.0,
        description="alarm when sessions with malformed calls (or with clarifying questions) earn a mean "
        "feedback reward more than this above the others'",
    )
    min_sessions: int = Field(4, ge=1, description="sessions each side needs before rewarded_gap is judged")


class LiveConfig(Strict):
    """Stage 6, real-time RL (components/live_rl.py): the served model's sessions and their feedback
    become on-policy RL steps, promoted only through the eval gate. The update itself is stages.rl's."""

    off_policy: Literal["drop", "importance"] = Field(
        "drop",
        description="sessions a checkpoint other than the served one produced: dropped, or trained with the "
        "logged behaviour logprobs' truncated importance weights (stages.rl.tis_cap)",
    )
    min_sessions: int = Field(
        16, ge=2, description="a cycle with fewer ready sessions trains nothing and waits (advantages need two)"
    )
    max_sessions: int = Field(512, gt=0, description="the most sessions one cycle trains on (the oldest first)")
    session_timeout_s: float = Field(
        900.0, gt=0, description="a session with no outcome feedback this long after its last turn is used as is"
    )
    dissatisfied_patterns: list[str] = Field(
        [r"\b(wrong|broken|still (fails|failing|wrong)|doesn'?t work|not what i)\b", r"\bundo\b"],
        description="regexes (case-insensitive) that label a follow-up's text dissatisfied when it has no flag",
    )
    epochs: int = Field(
        1,
        gt=0,
        description="passes of stages.rl's update over a cycle's turns; each token's importance weight "
        "against its logged behaviour logprob is truncated at stages.rl.tis_cap",
    )
    every_s: float = Field(60.0, gt=0, description="`harnessrl live run`: seconds between cycles")
    recurring_hours: int = Field(5, gt=0, description="on the cluster: hours between the recurring run's cycles")
    gates: list[GateConfig] = Field(
        [GateConfig(metric="success", tolerance=0.0), GateConfig(metric="malformed", tolerance=0.02)],
        min_length=1,
        description="the candidate against the served checkpoint on stages.eval's held-out suites",
    )
    monitors: LiveMonitorConfig = Field(default_factory=LiveMonitorConfig)
    train_on_alarm: bool = Field(
        False, description="false: a cycle whose sessions raise an alarm trains nothing (they are used up)"
    )

    @model_validator(mode="after")
    def _patterns_compile(self) -> LiveConfig:
        for i, p in enumerate(self.dissatisfied_patterns):
            try:
                re.compile(p)
            except re.error as e:
                raise ValueError(f"dissatisfied_patterns[{i}]: not a regex ({e})") from None
        return self


class EngineConfig(Strict):
    kind: Literal["hf", "vllm"] = "hf"
    tensor_parallel_size: int = Field(1, gt=0)
    max_model_len: int | None = Field(None, gt=0, description="None: the model's own context")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)


# ----------------------------------------------------------------------------- infra


class Toleration(Strict):
    key: str
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class StageResources(Strict):
    """Where and how one stage's pod runs on Kubernetes. Ignored by the local runner."""

    node_selector: dict[str, str] = {}
    tolerations: list[Toleration] = []
    accelerator_type: str | None = None
    accelerator_count: int = Field(0, ge=0)
    cpu: str | None = Field(None, description="CPU request, e.g. '8'")
    memory: str | None = Field(None, description="memory request, e.g. '64G'")
    shm_size: str | None = Field(None, description="size of a memory-backed /dev/shm, e.g. '16Gi'")
    timeout_s: int = Field(0, ge=0, description="0 means no timeout")
    retries: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _accelerator_pair(self) -> StageResources:
        if self.accelerator_count and not self.accelerator_type:
            raise ValueError("accelerator_count needs accelerator_type")
        return self


class PVCConfig(Strict):
    name: str
    mount_path: str


class SecretEnv(Strict):
    secret: str
    env: dict[str, str] = Field(description="secret key -> environment variable")


class TrainJobConfig(Strict):
    """Multi-node CPT and SFT as Kubeflow Trainer TrainJobs (harnessrl/cluster/trainjob.py)."""

    namespace: str = Field("kubeflow", description="where the TrainJobs are created")
    runtime: str = Field("torch-distributed", description="the ClusterTrainingRuntime they run on")
    service_account: str = Field("pipeline-runner", description="the training pods' account (IRSA: S3 access)")
    poll_s: float = Field(30, gt=0, description="seconds between status reads while waiting")


class RayGroup(Strict):
    """One group of a KubeRay cluster's pods, and the Ray resources each advertises."""

    replicas: int = Field(1, gt=0)
    resources: dict[str, float] = Field(
        {}, description="custom Ray resources each pod advertises, e.g. {rollout: 1}: what RL's placement asks for"
    )
    gpus: int = Field(0, ge=0, description="nvidia.com/gpu per pod")
    cpu: str | None = None
    memory: str | None = None
    shm_size: str | None = Field(None, description="a memory-backed /dev/shm, e.g. '64Gi' (vLLM, NCCL)")
    node_selector: dict[str, str] = {}
    tolerations: list[Toleration] = []


class RayJobConfig(Strict):
    """Async RL on a cluster: a RayJob on KubeRay (harnessrl/cluster/rayjob.py). The driver, the RL
    loop, runs on the head (and trains there when trainer_world_size is 1); the trainer's ranks, the
    rollout and the environment workers run on the worker groups that RL's placement names."""

    namespace: str = "kubeflow"
    ray_version: str = Field(description="the Ray in infra.image, which KubeRay must know")
    service_account: str = Field("pipeline-runner", description="the Ray pods' account (IRSA: S3 access)")
    ttl_s_after_finished: int = Field(600, ge=0, description="how long the finished RayJob's cluster stays, for logs")
    poll_s: float = Field(30, gt=0, description="seconds between status reads while waiting")
    head: RayGroup = Field(description="the driver's pod: the RL loop")
    workers: dict[str, RayGroup] = Field(description="worker groups by name, e.g. trainer, rollout and env")


class InfraConfig(Strict):
    name: str
    image: str = Field(description="container image with harnessrl installed, for cluster runs")
    pipeline_root: str | None = Field(None, description="s3://... or a PVC path for artifacts")
    pvc: PVCConfig | None = None
    secrets: list[SecretEnv] = []
    resources: dict[str, StageResources] = Field(description="per stage; the key 'default' applies to all")
    trainjob: TrainJobConfig | None = Field(
        None, description="how CPT and SFT run past one node; None: they never do (world_size <= GPUs per pod)"
    )
    rayjob: RayJobConfig | None = Field(None, description="how async RL runs on a cluster; None: in the stage's pod")

    @model_validator(mode="after")
    def _known_stages(self) -> InfraConfig:
        known = ["data", *STAGES, "live"]  # the data step and the live cycle are scheduled like stages
        unknown = set(self.resources) - set(known) - {"default"}
        if unknown:
            raise ValueError(f"resources has unknown stage(s) {sorted(unknown)}; known: {known}")
        return self

    def for_stage(self, stage: str) -> StageResources:
        """The stage's own entry, else the default, else nothing requested."""
        return self.resources.get(stage) or self.resources.get("default") or StageResources()


# ----------------------------------------------------------------------------- store


class StoreConfig(Strict):
    """Where artifacts (checkpoints, metrics, reports) and the DVC data remote live.

    A path is a local directory; `s3://bucket/prefix` is S3 or an S3-compatible server at
    `endpoint_url`. Credentials come from the environment (AWS_ACCESS_KEY_ID, ... or IRSA), never here.
    """

    uri: str = Field("runs/store", description="artifact store: a local directory or s3://bucket/prefix")
    data_remote: str = Field(
        "runs/dvc-remote", description="DVC remote for data/: a local directory or s3://bucket/prefix"
    )
    endpoint_url: str | None = Field(None, description="S3-compatible endpoint, e.g. http://minio:9000; None: AWS")
    region: str | None = None
    retry_mode: Literal["standard", "adaptive"] = "standard"
    max_attempts: int = Field(
        10, ge=0, description="botocore retries.max_attempts: retries per request after the first try"
    )
    connect_timeout_s: float = Field(10, gt=0)
    read_timeout_s: float = Field(60, gt=0)
    multipart_threshold_mb: int = Field(64, ge=5, description="files at least this big go up in parts")
    multipart_chunksize_mb: int = Field(16, ge=5, description="part size; S3's minimum is 5 MiB")
    max_concurrency: int = Field(8, gt=0, description="parallel part uploads/downloads per file")


# ----------------------------------------------------------------------------- the whole recipe


class Config(Strict):
    name: str = Field(description="recipe name")
    seed: int = 0
    model: ModelConfig
    data: DataConfig
    stages: StagesConfig
    reward: RewardConfig
    engine: EngineConfig
    live: LiveConfig = Field(default_factory=LiveConfig, description="real-time RL: `harnessrl live`")
    infra: InfraConfig
    store: StoreConfig = Field(default_factory=StoreConfig, description="not part of any stage's cache key")

    @model_validator(mode="after")
    def _long_horizon_compared(self) -> Config:
        if self.stages.eval.long_horizon_tasks and not self.stages.long_horizon.enabled:
            raise ValueError(
                "stages.eval.long_horizon_tasks: the comparison needs the long-horizon stage "
                "(stages.long_horizon.enabled is false); set it to 0"
            )
        return self

    @model_validator(mode="after")
    def _training_nodes_are_whole(self) -> Config:
        # Training past one pod's GPUs runs as a TrainJob of whole nodes on the shared PVC; a recipe
        # that asks for it without either, or for a fraction of a node, would never start: refused.
        for stage in ("cpt", "sft"):
            world, gpus = getattr(self.stages, stage).world_size, self.infra.for_stage(stage).accelerator_count
            if not gpus or world <= gpus:
                continue
            where = f"stages.{stage}.world_size: {world} ranks on infra.resources.{stage}'s {gpus} GPUs per node"
            if world % gpus:
                raise ValueError(f"{where} is not a whole number of nodes")
            if self.infra.trainjob is None or self.infra.pvc is None:
                raise ValueError(f"{where} needs a TrainJob: set infra.trainjob and infra.pvc (the shared folder)")
        return self

    @model_validator(mode="after")
    def _rayjob_places_every_actor(self) -> Config:
        # A RayJob runs the async RL stages; a placement that no worker group advertises would leave
        # its actors pending forever, and a RayJob config with no async stage would do nothing.
        if self.infra.rayjob is None:
            return self
        if self.infra.pvc is None:
            raise ValueError("infra.rayjob needs infra.pvc: the shared folder its pods and the stage exchange files in")
        async_stages = [s for s in ("rl", "long_horizon") if self.stage_runs_as_rayjob(s)]
        if not async_stages:
            raise ValueError("infra.rayjob: no enabled RL stage runs in mode async, so no RayJob would be created; "
                             "set infra.rayjob=null or mode: async")  # fmt: skip
        offered: dict[str, float] = {}
        for g in self.infra.rayjob.workers.values():
            for r, amount in g.resources.items():
                offered[r] = offered.get(r, 0) + amount * g.replicas
        for stage in async_stages:
            st = getattr(self.stages, stage)
            actors = {"rollout": st.rollout_workers, "env": st.env_workers, "trainer": st.trainer_world_size}
            for kind, wanted in st.placement.model_dump().items():
                missing = sorted(set(wanted) - {"CPU", "GPU"} - set(offered))
                if missing:
                    raise ValueError(f"stages.{stage}.placement.{kind}: no infra.rayjob worker group advertises "
                                     f"{missing} (they offer {sorted(offered)})")  # fmt: skip
                # Actors that do not fit stay pending until the deadline: refuse them now.
                for r, amount in wanted.items():
                    if r in offered and actors[kind] * amount > offered[r]:
                        raise ValueError(f"stages.{stage}.placement.{kind}: {actors[kind]} actors x {amount} {r} "
                                         f"need more than the {offered[r]:g} infra.rayjob's groups offer")  # fmt: skip
        return self

    def stage_runs_as_rayjob(self, stage: str) -> bool:
        st = getattr(self.stages, stage)
        return self.infra.rayjob is not None and st.enabled and st.mode == "async"

    def runs_as_job(self, stage: str) -> bool:
        """Whether the stage's work runs in a Kubernetes job (TrainJob or RayJob) that its pod waits on."""
        if stage in ("cpt", "sft"):
            return self.training_nodes(stage) > 1
        return stage in ("rl", "long_horizon") and self.stage_runs_as_rayjob(stage)

    def training_nodes(self, stage: str) -> int:
        """How many nodes CPT's or SFT's ranks span: 1 unless its world_size exceeds its pod's GPUs."""
        world, gpus = getattr(self.stages, stage).world_size, self.infra.for_stage(stage).accelerator_count
        return world // gpus if gpus and world > gpus else 1

    def enabled_stages(self) -> list[str]:
        """Stage names in chain order; `base` always runs."""
        return ["base"] + [s for s in STAGES[1:] if getattr(self.stages, s).enabled]

    def stage_slice(self, stage: str) -> dict[str, Any]:
        """Just what one stage reads. Passing only this to a task keeps the pipeline cache exact:
        changing one stage's config re-runs that stage (and, through its new output, those after it)."""
        common = {"name": self.name, "seed": self.seed, "model": self.model.model_dump()}
        if stage == "base":
            return common | {"data": self.data.model_dump()}
        out = common | {"stage": getattr(self.stages, stage).model_dump()}
        if stage in ("cpt", "sft") and self.training_nodes(stage) > 1:
            # What the stage needs to create its TrainJob (harnessrl/cluster/trainjob.py).
            infra = self.infra
            out |= {"cluster": {"image": infra.image, "resources": infra.for_stage(stage).model_dump(),
                                "pvc": infra.pvc.model_dump(), "secrets": [s.model_dump() for s in infra.secrets],
                                "trainjob": infra.trainjob.model_dump(), "nodes": self.training_nodes(stage)}}  # fmt: skip
        if stage in ("rl", "long_horizon"):
            # Live RL's weights are not the stage's: changing them must not re-run it.
            out |= {"reward": self.reward.model_dump(exclude={"live"})}
            if self.stage_runs_as_rayjob(stage):
                # What the stage needs to create its RayJob (harnessrl/cluster/rayjob.py).
                infra = self.infra
                out |= {"rayjob": {"image": infra.image, "pvc": infra.pvc.model_dump(),
                                   "secrets": [s.model_dump() for s in infra.secrets],
                                   "timeout_s": infra.for_stage(stage).timeout_s,
                                   "rayjob": infra.rayjob.model_dump()}}  # fmt: skip
        if stage in ("rl", "long_horizon", "eval"):
            out |= {"engine": self.engine.model_dump()}
        return out


def config_hash(obj: Any) -> str:
    """Stable sha256 of a JSON-able object (sorted keys)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# ----------------------------------------------------------------------------- composing


class ConfigError(ValueError):
    """A bad recipe or override. `str(err)` is one line naming the dotted field."""


def compose(overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Compose conf/config.yaml with Hydra overrides, resolve, validate. Raises ConfigError."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=list(overrides))
        raw = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingConfigException as e:
        raise ConfigError(_one_line_missing_option(e)) from None
    except MissingMandatoryValue as e:
        raise ConfigError(f"{e.full_key}: missing required value (set it with {e.full_key}=...)") from None
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(_first_line(str(e))) from None
    finally:
        GlobalHydra.instance().clear()
    return validate(raw)


def validate(raw: Any) -> Config:
    try:
        return Config.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_one_line_validation(e)) from None


def _one_line_validation(e: ValidationError) -> str:
    err = e.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "<root>"
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    elif err["type"] == "missing":
        msg = "missing required value"
    else:
        msg = err["msg"].removeprefix("Value error, ")
        if "input" in err and not isinstance(err["input"], dict | list):
            msg += f" (got {err['input']!r})"
    more = len(e.errors()) - 1
    where = "" if field == "<root>" else f"{field}: "  # a whole-recipe check names its fields itself
    return f"{where}{msg}" + (f" (+{more} more error{'s' * (more > 1)})" if more else "")


def _one_line_missing_option(e: Exception) -> str:
    # Hydra says "In 'config': Could not find 'model/medium'"; list the options from conf/ itself.
    m = re.search(r"Could not find '([^']+)'", str(e))
    if not m or "/" not in m.group(1):
        return _first_line(str(e))
    group, _, option = m.group(1).rpartition("/")
    options = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
    return f"{group.replace('/', '.')}: unknown option {option!r} (available: {', '.join(options)})"


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "invalid config"
    # Hydra names an unknown key as "Could not override 'x.y'": say it in our words.
    if line.startswith("Could not override '"):
        key = line.split("'")[1]
        return f"{key}: unknown field (no such key in the recipe; to add one use +{key}=...)"
    return line
