"""Composing a recipe: the Hydra tree in conf/ with overrides, validated, and its errors in one line.

Every field's default is the pydantic model's. Hydra still has to see each field, or a plain override
of one that no YAML sets (`stages.rl.max_turns=8`) would be refused as unknown. So `compose` hands
Hydra the models' defaults as a config of its own, SCHEMA_DEFAULTS, which conf/config.yaml's defaults
list composes first; the groups and the recipe then set only what the models leave open or what they
choose (the package docstring says which file holds what). A part that is None by default (an optional
model) is None in that tree: its keys are the option's that sets it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from harnessrl.config.recipe import Config

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
SCHEMA_DEFAULTS = "schema_defaults"  # its name in conf/config.yaml's defaults list


class ConfigError(ValueError):
    """A bad recipe or override. `str(err)` is one line naming the dotted field."""


def compose(overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Compose conf/config.yaml with Hydra overrides, resolve, validate. Raises ConfigError."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    ConfigStore.instance().store(name=SCHEMA_DEFAULTS, node=defaults_tree(Config))
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


def defaults_tree(model: type[BaseModel]) -> dict[str, Any]:
    """The model's fields as a tree of their defaults, as Hydra composes it: a nested model without a
    default is its own tree, and any other field without one is "???" (Hydra's missing value), so a
    recipe that leaves it unset fails naming it."""
    tree: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if not field.is_required():
            tree[name] = to_jsonable_python(field.get_default(call_default_factory=True))
        elif isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            tree[name] = defaults_tree(field.annotation)
        else:
            tree[name] = "???"
    return tree


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
