"""The recipe's JSON Schema, with the defaults a run of it gets.

A model's own JSON Schema gives each field its pydantic default, and shares one definition between
the places a model is used (CPT's and SFT's TrainConfig). What a run gets is the composed recipe: the
groups and the recipe set values the models leave open or choose otherwise. So the definitions are
written out in place, and each field's `default` is the composed recipe's value for it.
"""

from __future__ import annotations

from typing import Any

from harnessrl.config.recipe import Config


def json_schema(cfg: Config) -> dict[str, Any]:
    """Config's JSON Schema, inlined, with `default` on every field set to its value in `cfg`."""
    schema = Config.model_json_schema()
    schema = _inline(schema, schema.pop("$defs", {}))
    _fill(schema, cfg.model_dump(mode="json"))
    return schema


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """`node` with every {"$ref": "#/$defs/X"} replaced by a copy of X (the models have no cycles)."""
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        node = target | {k: v for k, v in node.items() if k != "$ref"}
    return {k: _inline(v, defs) for k, v in node.items()}


def _fill(node: dict[str, Any], value: dict[str, Any]) -> None:
    """Set each property's default from `value`; a nested model's fields get theirs one by one."""
    for name, prop in node.get("properties", {}).items():
        if name not in value:
            continue
        nested = next((b for b in [prop, *prop.get("anyOf", [])] if "properties" in b), None)
        if nested is not None and isinstance(value[name], dict):
            prop.pop("default", None)  # the model's (e.g. None for an optional part): its fields say it now
            _fill(nested, value[name])
        else:
            prop["default"] = value[name]
