"""What every config model shares: unknown fields are refused and values are frozen; and the hash
that keys a config (a stage's resume state, a data folder's name, a manifest)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def config_hash(obj: Any) -> str:
    """Stable sha256 of a JSON-able object (sorted keys)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
