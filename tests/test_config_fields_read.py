"""No setting that does nothing: every config field is read somewhere outside the config package.

A field counts as read where the code names it as an attribute (`.steps`), a string (a key such as
`["steps"]`, or a name that a table hands to getattr, as the hack monitors' thresholds) or a keyword
argument (`steps=`) in harnessrl/, components/ or pipelines/. That is a coarse net, since a name is a
name (`name`, `enabled` are read everywhere), but a field that no code names at all surely does
nothing. The settings that are named but ignored in some mode are refused by the models' validators
instead (tests/test_config_recipes.py: "Settings that would do nothing").
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

from pydantic import BaseModel

from harnessrl.config import Config

REPO = Path(__file__).resolve().parent.parent
SOURCES = [
    p
    for d in ("harnessrl", "components", "pipelines")
    for p in sorted((REPO / d).rglob("*.py"))
    if (REPO / "harnessrl" / "config") not in p.parents
]


def fields(model: type[BaseModel], seen: set[type[BaseModel]] | None = None) -> list[tuple[str, str]]:
    """(Model.field, field name) for every field of `model` and of the models it holds, once each."""
    seen = set() if seen is None else seen
    if model in seen:
        return []
    seen.add(model)
    out = []
    for name, field in model.model_fields.items():
        out.append((f"{model.__name__}.{name}", name))
        for t in _types(field.annotation):
            if isinstance(t, type) and issubclass(t, BaseModel):
                out += fields(t, seen)
    return out


def _types(annotation: object) -> list[object]:
    args = typing.get_args(annotation)
    return [annotation] + [t for a in args for t in _types(a)]


def test_every_config_field_is_read_outside_the_config_package() -> None:
    code = "\n".join(p.read_text() for p in SOURCES)
    unread = []
    for where, name in fields(Config):
        pattern = rf"\.{name}\b|[\"']{name}[\"']|\b{name}="
        if not re.search(pattern, code):
            unread.append(where)
    assert not unread, f"config fields that no code reads: {unread} (make them take effect, or remove them)"
