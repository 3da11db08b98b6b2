"""One home for each default (harnessrl/config/__init__.py says which). A field's default is its
pydantic model's, which compose hands to Hydra, and no YAML under conf/ but a recipe restates one of
those. A group's default.yaml, and conf/config.yaml, set only what the models leave open; any other
group option (the tiny data, the vLLM engine, a cluster) sets what that option is, which may differ
from a default. Recipes (conf/recipe/) choose on purpose and are not checked.

Inside a part that is absent by default (infra.trainjob, model.arch: None) or an entry of a dict
(infra.resources.cpt), Hydra has no default from the models until an option sets the part, so the
option's YAML is where each key of it lives: there, equal to a default is not restating."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_jsonable_python

from harnessrl.config import CONF_DIR, Config, InfraConfig, RLConfig, compose

FILES = sorted(str(p.relative_to(CONF_DIR)) for p in CONF_DIR.rglob("*.yaml") if p.parts[-2] != "recipe")
BASE = [f for f in FILES if f == "config.yaml" or f.endswith("/default.yaml")]


def _model(t: object) -> type[BaseModel] | None:
    return t if isinstance(t, type) and issubclass(t, BaseModel) else None


def _nested(annotation: object) -> tuple[type[BaseModel] | None, type[BaseModel] | None]:
    """(the model a field holds, as in `X` or `X | None`; the model of its entries, as in `dict[str, X]`)."""
    if typing.get_origin(annotation) is dict:
        return None, _model(typing.get_args(annotation)[1])
    if typing.get_origin(annotation) is list:
        return None, None
    return next((m for a in (annotation, *typing.get_args(annotation)) if (m := _model(a))), None), None


def defaulted_leaves(model: type[BaseModel], doc: dict, where: str = "", in_tree: bool = True) -> list[tuple]:
    """(dotted field, whether the YAML's value equals the model's default, whether Hydra has that default
    from the models) for each value in `doc` that sets a field with a default; nested models and dicts
    of models are walked into."""
    out = []
    for key, value in doc.items():
        if key == "defaults":  # Hydra's defaults list, not a field
            continue
        assert key in model.model_fields, f"{where}{key}: not a field of {model.__name__}"
        field, dotted = model.model_fields[key], f"{where}{key}"
        sub, entries = _nested(field.annotation)
        if isinstance(value, dict) and sub:
            # compose's defaults tree holds a nested model's fields unless the model is absent by default
            present = field.is_required() or field.get_default(call_default_factory=True) is not None
            out += defaulted_leaves(sub, value, f"{dotted}.", in_tree and present)
        elif isinstance(value, dict) and entries:
            for name, entry in value.items():
                out += defaulted_leaves(entries, entry, f"{dotted}.{name}.", False)
        elif not field.is_required():
            given = to_jsonable_python(TypeAdapter(field.annotation).validate_python(value))
            same = given == to_jsonable_python(field.get_default(call_default_factory=True))
            out.append((dotted, same, in_tree))
    return out


def leaves_of(file: str) -> list[tuple]:
    """The file's defaulted leaves, checked against the model of the place it composes into."""
    path = Path(file)
    model: type[BaseModel] = Config
    for part in path.parts[:-1]:
        model = _nested(model.model_fields[part].annotation)[0]
    doc = yaml.safe_load((CONF_DIR / path).read_text()) or {}
    return defaulted_leaves(model, doc)


def test_the_check_tells_a_restated_default_from_a_choice() -> None:
    doc = {"steps": 5, "max_turns": 4, "temperature": 0.7, "monitors": {"warmup_steps": 3, "drift_max": None}}
    assert defaulted_leaves(RLConfig, doc) == [
        ("max_turns", True, True),
        ("temperature", False, True),
        ("monitors.warmup_steps", True, True),
        ("monitors.drift_max", False, True),
    ]
    cluster = {"pipeline_root": None, "trainjob": {"poll_s": 30}, "resources": {"cpt": {"retries": 0}}}
    assert defaulted_leaves(InfraConfig, cluster) == [
        ("pipeline_root", True, True),
        ("trainjob.poll_s", True, False),  # absent by default: the YAML holds it
        ("resources.cpt.retries", True, False),  # an entry of a dict
    ]


@pytest.mark.parametrize("file", FILES)
def test_no_group_option_restates_a_default(file: str) -> None:
    restated = [dotted for dotted, same, in_tree in leaves_of(file) if same and in_tree]
    assert not restated, f"conf/{file} restates the models' defaults of {restated}: remove them"


@pytest.mark.parametrize("file", BASE)
def test_a_groups_default_sets_only_what_the_models_leave_open(file: str) -> None:
    chosen = [dotted for dotted, same, _ in leaves_of(file) if not same]
    assert not chosen, (
        f"conf/{file} overrides the models' defaults of {chosen}: change the default in harnessrl/config/ "
        "if every recipe should have it, else set it in the recipes that choose it (conf/recipe/)"
    )


def test_a_field_no_yaml_sets_takes_a_plain_override() -> None:
    # The models' defaults are in Hydra's tree (compose's schema_defaults), so no `+` is needed.
    cfg = compose(["stages.rl.max_turns=7", "stages.long_horizon.monitors.warmup_steps=0", "store.max_attempts=3"])
    assert (cfg.stages.rl.max_turns, cfg.stages.long_horizon.monitors.warmup_steps) == (7, 0)
    assert cfg.store.max_attempts == 3
    # A part absent by default takes plain overrides of the keys its option states.
    assert compose(["recipe=qwen_coder_7b", "infra.trainjob.poll_s=0.5"]).infra.trainjob.poll_s == 0.5
