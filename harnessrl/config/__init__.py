"""Typed config: the Hydra tree in conf/ composes, these pydantic models validate.

Every field of a recipe is declared here, once. Hydra gives composition and overrides; pydantic gives
types, ranges and `extra="forbid"`, so a typo is an error, never a silent no-op.

- base.py: what every model shares (`Strict`), and `config_hash`;
- stages.py: the chain's stages (STAGES, CPT/SFT, RL, long-horizon RL, eval and its gates);
- harness.py: one episode's budgets and context policy, which a stage derives from its config;
- models.py: the model, the data, the rewards, the engine, real-time RL;
- infra.py: where stages run (Kubernetes, TrainJob, RayJob), the parts of a stage's slice that
  carry a TrainJob or RayJob to it, and the artifact store;
- recipe.py: `Config`, the whole recipe, and the checks that span its parts;
- compose.py: `compose` (conf/ with Hydra overrides, validated) and `ConfigError`, one line each;
- schema.py: the recipe's JSON Schema, with the defaults a run of it gets.

Which stage gets which part of the recipe, and where it runs, is the pipeline's: pipelines/routing.py.

Where each value lives, so that each has one home:
- A field's default is its model's, here, and nowhere else. `compose` hands these defaults to Hydra
  first (conf/config.yaml's `schema_defaults`), so every field can be overridden as it is.
- conf/<group>/default.yaml sets only what the models leave open (required fields, such as a stage's
  steps and lr), with the reasons for their values.
- Any other group option describes one thing and sets what that thing is, where it differs from the
  defaults: the tiny data's imperfect expert (data/tiny.yaml guess_share), the vLLM engine, S3, a
  GPU cluster's pools and sizes. A part that is absent by default (infra.trainjob, infra.rayjob,
  model.arch) or an entry of a dict (infra.resources.cpt) has no defaults in Hydra's tree until an
  option sets it, so there the option states every key it wants overridable, defaults included.
- A recipe (conf/recipe/*.yaml) sets what it chooses: the tiny recipe's warmups, checkpoint intervals,
  SFT length buckets, long-horizon context and long-horizon comparison, for instance, which qwen_coder_7b states for itself.
tests/test_config_defaults.py fails on a YAML outside conf/recipe/ that restates a default Hydra
already has, and on a default.yaml that overrides one. `harnessrl config show` prints what a recipe composes to, and
`harnessrl config schema` (schema.py) each field with the default a run of the recipe gets.
"""

from harnessrl.config.base import Strict, config_hash
from harnessrl.config.compose import CONF_DIR, ConfigError, compose, validate
from harnessrl.config.harness import Budgets, ContextConfig, episode_budgets
from harnessrl.config.infra import (
    InfraConfig,
    PVCConfig,
    RayGroup,
    RayJobConfig,
    RayJobSlice,
    SecretEnv,
    StageResources,
    StoreConfig,
    Toleration,
    TrainJobConfig,
    TrainJobSlice,
)
from harnessrl.config.models import (
    MINED_SUITES,
    ArchConfig,
    CorpusFileConfig,
    CorpusFilterConfig,
    DataConfig,
    EngineConfig,
    GeneratedConfig,
    HardLookupDataConfig,
    LiveConfig,
    LiveMonitorConfig,
    LiveRewardConfig,
    LongHorizonDataConfig,
    ModelConfig,
    MultiLookupDataConfig,
    RewardConfig,
    SourceConfig,
    SuiteCounts,
    SweFileConfig,
)
from harnessrl.config.recipe import Config
from harnessrl.config.stages import (
    EVAL_METRICS,
    STAGES,
    EvalConfig,
    GateConfig,
    LongHorizonConfig,
    MonitorConfig,
    Placement,
    RLConfig,
    StagesConfig,
    TrainConfig,
)

__all__ = [
    "CONF_DIR",
    "EVAL_METRICS",
    "MINED_SUITES",
    "STAGES",
    "ArchConfig",
    "Budgets",
    "Config",
    "ConfigError",
    "ContextConfig",
    "CorpusFileConfig",
    "CorpusFilterConfig",
    "DataConfig",
    "EngineConfig",
    "EvalConfig",
    "GateConfig",
    "GeneratedConfig",
    "HardLookupDataConfig",
    "InfraConfig",
    "LiveConfig",
    "LiveMonitorConfig",
    "LiveRewardConfig",
    "LongHorizonConfig",
    "LongHorizonDataConfig",
    "ModelConfig",
    "MonitorConfig",
    "MultiLookupDataConfig",
    "PVCConfig",
    "Placement",
    "RLConfig",
    "RayGroup",
    "RayJobConfig",
    "RayJobSlice",
    "RewardConfig",
    "SecretEnv",
    "SourceConfig",
    "StageResources",
    "StagesConfig",
    "StoreConfig",
    "Strict",
    "SuiteCounts",
    "SweFileConfig",
    "Toleration",
    "TrainConfig",
    "TrainJobConfig",
    "TrainJobSlice",
    "compose",
    "config_hash",
    "episode_budgets",
    "validate",
]
