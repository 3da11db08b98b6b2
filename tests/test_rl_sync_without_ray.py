"""Sync RL needs no Ray: it loads Ray only in async mode (harnessrl/rl/fleet.py). These run in a child
Python where Ray cannot be imported, as on a machine without it, so they run whether or not Ray is
installed here; beside the async tests they would skip exactly where they matter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harnessrl.config import compose
from pipelines.routing import stage_slice
from tests.conftest import SMOKE, needs_bwrap

REPO = Path(__file__).resolve().parent.parent

# As if Ray were not installed: a None in sys.modules makes `import ray` raise ModuleNotFoundError
# and importlib.util.find_spec("ray") answer None, so an optional check sees it absent too.
NO_RAY = "import sys\nsys.modules['ray'] = None\n"


def without_ray(code: str) -> None:
    subprocess.run([sys.executable, "-c", NO_RAY + code], check=True, cwd=REPO)


def test_the_sync_path_imports_without_ray() -> None:
    without_ray("import components.rl, components.long_horizon_rl, harnessrl.rl.loop, pipelines.dag")


@needs_bwrap
def test_a_sync_rl_stage_trains_without_ray(tiny_base: dict[str, Path], tmp_path: Path) -> None:
    cfg = compose([*SMOKE, "stages.rl.steps=1"])
    assert cfg.stages.rl.mode == "sync"
    args = ["rl", json.dumps(stage_slice(cfg, "rl")), str(tiny_base["data"]), "md5", str(tiny_base["base"]),
            str(tmp_path / "rl")]  # fmt: skip
    without_ray(
        "from components.rl import work\nfrom harnessrl.stage import run_stage\n"
        f"run_stage({args[0]!r}, work, *{args[1:]!r})\n"
    )
    assert (tmp_path / "rl" / "model.safetensors").is_file()
