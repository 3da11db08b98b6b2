"""The model, its data, its rewards, the engine that samples it, and real-time RL's settings."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

from harnessrl.config.base import Strict
from harnessrl.config.stages import GateConfig


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
    """The model the chain starts from: a local checkpoint, or an architecture trained from scratch."""

    path: str | None = Field(None, description="local Hugging Face model directory; never a hub id")
    arch: ArchConfig | None = Field(None, description="dimensions of a model trained from scratch")
    dtype: Literal["float32", "bfloat16"] = "float32"
    tool_format: Literal["hermes", "qwen3_coder", "llama3_json", "mistral"] = Field(
        "hermes",
        description="how the model writes tool calls (harnessrl/harness/formats/); its chat template's format",
    )

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if (self.path is None) == (self.arch is None):
            raise ValueError("set exactly one of model.path (a local HF directory) or model.arch")
        return self


# ----------------------------------------------------------------------------- data


class SuiteCounts(Strict):
    """How many of a generated suite's tasks go into the data folder, by use."""

    num_sft: int = Field(0, ge=0, description="expert conversations for SFT")
    num_prompts: int = Field(0, ge=0, description="RL prompts")
    num_heldout: int = Field(0, ge=0, description="held-out eval prompts")


class LongHorizonDataConfig(SuiteCounts):
    """The long-horizon suite's share of the data folder (harnessrl/tasks/long_horizon.py); each SFT
    conversation is one row per context segment. The counts are of generated tasks; the expert's
    harness below also makes the SFT conversations of long-horizon tasks mined from real sources."""

    tasks_per_repo: int = Field(4, gt=0)
    facts_min: int = Field(3, ge=2, description="constants a task asks for, at least")
    facts_max: int = Field(3, ge=2, description="constants a task asks for, at most")
    verbose_share: float = Field(
        0.7, ge=0, le=1, description="share of the expert's summaries that say where each value was found"
    )
    # The expert's harness, in its estimate of tokens (4 characters each): on generated repos it
    # summarizes after the second search (~107), and its verbose conversations need a second summary
    # before the answer. Real code's longer names and paths need a lower one (conf/recipe/smol.yaml).
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


class MultiLookupDataConfig(SuiteCounts):
    """The multi_lookup suite (harnessrl/tasks/multi_lookup.py): "What are the values of A and B?" on the
    generated repos, a search per name and no context budget, so the policy can search in parallel. The
    counts are of generated tasks; `parallel_share` applies to tasks mined from real sources too."""

    names_min: int = Field(2, ge=2, description="constants a task asks for, at least")
    names_max: int = Field(3, ge=2, description="constants a task asks for, at most")
    parallel_share: float = Field(
        0.2,
        ge=0,
        le=1,
        description="share of the expert's conversations that make every search in one turn; the others "
        "make one search per turn, so SFT puts parallel calls within reach and RL's reward decides",
    )

    @model_validator(mode="after")
    def _names_range(self) -> MultiLookupDataConfig:
        if self.names_min > self.names_max:
            raise ValueError("names_min must not exceed names_max")
        return self


class HardLookupDataConfig(SuiteCounts):
    """The hard_lookup suite (harnessrl/tasks/hard_lookup.py): lookups of constants written with a type
    annotation (`NAME: int = 7`) in repos of their own, which the lookup habit's search (`^NAME =`)
    misses. Solvable (search again without ` =`), but the SFT conversations never show that second
    search, so the policy mostly fails them: the hard tasks on which the reward-hack lessons are shown
    (bench/lessons.py)."""

    num_repos: int = Field(16, gt=0, description="generated repos of annotated constants, a quarter held out")
    ask_share: float = Field(
        0.25,
        ge=0,
        le=1,
        description="share of the expert's conversations that ask the user after the first search misses "
        "(no user answers, so the episode ends unsolved); the others answer 0 (a guess, always wrong)",
    )


class GeneratedConfig(Strict):
    """Generated Python repos (harnessrl/tasks/repogen.py): the tiny recipe's world, a quarter held out by repo."""

    num_repos: int = Field(gt=0, description="generated Python repos")
    files_per_repo: int = Field(gt=0)


SOURCE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
# Suites that can be mined from a real source (harnessrl/tasks/mine.py).
MINED_SUITES = ("lookup", "multi_lookup", "long_horizon", "edit", "lint", "bugfix")


class SourceConfig(Strict):
    """One source of code: a repository (mined for tasks and read into the corpus), or generated repos.

    `path` is a local directory or git checkout, an archive on the store (`s3://bucket/key.tar.gz`),
    `stdlib:NAME` (a package of the standard library of the Python that builds the data) or
    `site:NAME` (an installed package). A whole source is train or held out: no held-out source is
    ever trained on, in the corpus or in SFT."""

    name: str = Field(pattern=SOURCE_NAME, description="unique among data.sources; names its folder")
    path: str | None = Field(None, description="dir, git checkout, s3://....tar.gz, stdlib:NAME or site:NAME")
    generated: GeneratedConfig | None = Field(None, description="generated repos instead of a path")
    revision: str | None = Field(None, description="a git checkout's commit to read (default: HEAD)")
    license: str | None = Field(None, description="recorded with the data version (SPDX id, e.g. PSF-2.0)")
    include: list[str] = Field(["**/*.py"], min_length=1, description="globs of files to read, from the root")
    exclude: list[str] = Field([], description="globs of files to skip, from the root")
    split: Literal["train", "heldout"] = "train"
    sft: bool = Field(
        True,
        description="train sources: whether their tasks' expert episodes are SFT conversations; false keeps "
        "them RL prompts only, so RL meets repositories whose paths and names SFT never showed",
    )
    tasks: dict[Literal[MINED_SUITES], Annotated[int, Field(ge=0)]] = Field(
        {}, description="suite -> the most validated tasks mined from this source ({}: corpus only)"
    )

    @model_validator(mode="after")
    def _one_kind(self) -> SourceConfig:
        if (self.path is None) == (self.generated is None):
            raise ValueError(f"source {self.name!r}: set exactly one of path or generated")
        if self.generated is not None:
            # Generated repos hold a quarter out by repo, and have no revision or license to record.
            fields = type(self).model_fields
            idle = [f for f in ("revision", "license", "include", "exclude", "split", "sft", "tasks")
                    if getattr(self, f) != fields[f].default]  # fmt: skip
            if idle:
                raise ValueError(f"source {self.name!r}: {', '.join(idle)} apply to a path, not generated repos")
        elif self.revision is not None and self.path.startswith(("s3://", "stdlib:", "site:")):
            raise ValueError(f"source {self.name!r}: revision is for a git checkout, not {self.path}")
        if self.split == "heldout" and not self.sft:
            raise ValueError(f"source {self.name!r}: sft is for a train source; a held-out one is never trained on")
        return self


class SweFileConfig(Strict):
    """Task rows in the SWE-bench schema (SWE-Gym, SWE-smith, R2E-Gym publish them) and the local
    clones of their repositories, imported as the swe suite (harnessrl/tasks/swe.py)."""

    path: str = Field(description="the rows: .jsonl, a .json list or .parquet")
    repos: str = Field(description="where the clones are: <repos>/<owner>/<name> or <repos>/<name>")
    heldout_repos: list[str] | None = Field(
        None, description="repos (owner/name) held out whole; None: a quarter of the rows' repos"
    )


class CorpusFileConfig(Strict):
    """Code-dataset shards, as The Stack v2 and StarCoderData ship them: Parquet or JSONL files with a
    text column. `path` is a file, a directory of them or a glob, local or on the store (s3://)."""

    path: str
    format: Literal["parquet", "jsonl"]
    text_field: str = Field("content", min_length=1, description="the column that holds a file's text")
    path_field: str | None = Field(None, description="the column that holds a file's path, for the filters")


class CorpusFilterConfig(Strict):
    """Which files enter the CPT corpus (harnessrl/data/corpus.py); every drop is counted by reason."""

    extensions: list[str] = Field([".py"], min_length=1, description="files of sources kept by suffix")
    max_file_bytes: int = Field(100_000, gt=0, description="larger files are left out")
    near_dup_threshold: float = Field(
        0.85, gt=0, le=1, description="MinHash Jaccard estimate above which a file is a near-duplicate"
    )
    shard_files: int = Field(2000, gt=0, description="files per corpus shard")


class DataConfig(Strict):
    name: str
    dir: str = Field(
        description="where data folders live, relative to the repo root or absolute: each data config "
        "gets its own subfolder `<name>-<config hash>`, tracked by DVC through `<subfolder>.dvc` next to it"
    )
    seed: int = 0
    sources: list[SourceConfig] = Field(min_length=1, description="the code the data is made from")
    corpus: list[CorpusFileConfig] = Field([], description="code-dataset shards read into the CPT corpus")
    swe: list[SweFileConfig] = Field([], description="SWE-bench-format task files, imported as the swe suite")
    filters: CorpusFilterConfig = Field(default_factory=CorpusFilterConfig)
    num_sft: int = Field(0, ge=0, description="lookup conversations for SFT from generated repos")
    num_prompts: int = Field(0, ge=0, description="RL lookup prompts from generated repos")
    num_heldout: int = Field(0, ge=0, description="held-out lookup prompts from generated repos")
    guess_share: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(
        {},
        description="suite -> share of its SFT conversations where the teacher answers '0' without looking "
        "(lookups: only 'what is the value' questions): always wrong, an imperfect expert, as real ones are, "
        "whose habit SFT copies and only RL's outcome reward can correct",
    )
    long_horizon: LongHorizonDataConfig = Field(default_factory=LongHorizonDataConfig)
    multi_lookup: MultiLookupDataConfig = Field(default_factory=MultiLookupDataConfig)
    hard_lookup: HardLookupDataConfig = Field(default_factory=HardLookupDataConfig)

    @model_validator(mode="after")
    def _sources_named_once(self) -> DataConfig:
        names = [s.name for s in self.sources]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"data.sources: the name {twice[0]!r} is used twice; each source needs its own")
        if sum(s.generated is not None for s in self.sources) > 1:
            raise ValueError("data.sources: at most one source of generated repos")
        if self.generated is None:
            # These count tasks of generated repos; without such a source they would do nothing.
            counts = {"": self, "long_horizon.": self.long_horizon, "multi_lookup.": self.multi_lookup,
                      "hard_lookup.": self.hard_lookup}  # fmt: skip
            idle = [f"{prefix}{k}={getattr(sub, k)}" for prefix, sub in counts.items()
                    for k in ("num_sft", "num_prompts", "num_heldout") if getattr(sub, k)]  # fmt: skip
            if idle:
                raise ValueError(f"{', '.join(idle)} count tasks of generated repos, and data.sources has "
                                 "none; remove them, or add a source with generated: {num_repos, files_per_repo}")  # fmt: skip
        if (
            not any(s.split == "train" for s in self.sources if s.generated is None)
            and self.corpus == []
            and self.generated is None
        ):
            raise ValueError("data.sources: every source is held out, so nothing is left to train on")
        return self

    @property
    def generated(self) -> GeneratedConfig | None:
        """The generated repos' source, if the data has one."""
        return next((s.generated for s in self.sources if s.generated is not None), None)


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
    malformed_policy: Literal["negative", "drop"] = Field(
        "negative",
        description="negative: a malformed turn costs `malformed`; drop: an episode with one gets no gradient "
        "and leaves its group's baseline (the first hack's setting, an ablation: bench/lessons.py)",
    )
    wrong: float = Field(0.0, le=0, description="per episode that ended on a wrong answer or an unfinished task")
    turns: float = Field(-0.02, le=0, description="per turn of a solved task")
    tokens: float = Field(0.0, le=0, description="per 1k generated tokens of a solved task")
    parallel: float = Field(0.05, ge=0, description="per turn with independent calls run in parallel, of a solved task")
    clarify: float = Field(-0.1, le=0, description="per clarifying question beyond what the task needs")
    summary_tokens: float = Field(-0.5, le=0, description="per 1k tokens of self-summaries, of a solved task")
    overlong: float = Field(0.0, le=0, description="per episode that ran out of a budget instead of answering")
    live: LiveRewardConfig = Field(default_factory=LiveRewardConfig, description="real-time RL's signals")

    @model_validator(mode="after")
    def _drop_has_no_weight(self) -> RewardConfig:
        # Under drop every episode with a malformed turn is out of the gradient, so a weight on those
        # turns would change nothing: refused rather than silently idle.
        if self.malformed_policy == "drop" and self.malformed != 0:
            raise ValueError(
                "reward.malformed: under malformed_policy=drop an episode with a malformed turn gets no "
                "gradient, so this weight would do nothing; set reward.malformed=0 (conf/reward/malformed_drop.yaml)"
            )
        return self


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
    """What samples rollouts and eval episodes: hf (batched torch with a KV cache, harnessrl/engines/hf.py)
    or vLLM (harnessrl/engines/vllm.py). The sizes are vLLM's."""

    kind: Literal["hf", "vllm"] = "hf"
    tensor_parallel_size: int = Field(1, gt=0, description="vllm: GPUs one engine spans")
    max_model_len: int | None = Field(None, gt=0, description="vllm: the longest sequence; None: the model's context")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1, description="vllm: the share of GPU memory it may take")

    @model_validator(mode="after")
    def _every_setting_takes_effect(self) -> EngineConfig:
        # The hf engine reads none of vLLM's sizes: a recipe that sets one would not run the way it reads.
        if self.kind == "hf":
            vllm_only = ("tensor_parallel_size", "max_model_len", "gpu_memory_utilization")
            fields = type(self).model_fields
            idle = [f"{f}={getattr(self, f)}" for f in vllm_only if getattr(self, f) != fields[f].default]
            if idle:
                raise ValueError(f"{' and '.join(idle)} take effect only with kind vllm (the hf engine reads none of "
                                 "them): set kind: vllm, or leave them at their defaults")  # fmt: skip
        return self
