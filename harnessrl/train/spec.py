"""A job's description for the processes that run it, as a file they all read.

A job is `module:function` and the stage context it runs on. The launcher writes the spec into the
output folder every process sees, each process (a torchrun rank here, a TrainJob's pod, a RayJob's
driver) reads it back and calls the function, and the first writes its metrics to the result file.
Across nodes that folder is shared storage (the pipeline root's PVC). No torch here: the stages that
only create a cluster job write a spec without loading it.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Callable
from pathlib import Path

from harnessrl.stage import StageContext


def resolve(target: str) -> Callable[..., dict]:
    """The function `module:function` names."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def write_spec(target: str, ctx: StageContext) -> tuple[Path, Path]:
    """The job's spec, in ctx's output folder: (spec, result)."""
    spec = ctx.out / ".launch.json"
    result = ctx.out / ".launch-result.json"
    fields = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(ctx).items()}
    spec.write_text(json.dumps({"target": target, "ctx": fields, "result": str(result)}))
    return spec, result


def read_spec(spec_path: str | Path) -> tuple[str, StageContext, Path]:
    """What `write_spec` wrote: (target, ctx, result path)."""
    spec = json.loads(Path(spec_path).read_text())
    ctx = StageContext(**{k: (v if k == "cfg" or v is None else Path(v)) for k, v in spec["ctx"].items()})
    return spec["target"], ctx, Path(spec["result"])
