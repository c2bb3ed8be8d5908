# The cluster image for `backend: verl` runs: verl with vLLM and Megatron-core on CUDA, plus cancelctl
# (whose `losses` register in verl through the `verl.plugins` entry point), for single- and multi-node
# runs (the job starts Ray from this image: `ray` comes with verl).
# Build:  docker build -t cancelctl:verl-0.9.1 .
# Use:    cluster: {container_image: cancelctl:verl-0.9.1, container_runtime: pyxis}   (or an
#         apptainer .sif built from this image with `apptainer build cancelctl.sif docker-daemon://cancelctl:verl-0.9.1`)
# Versions: the ARGs below are the project's pins (pyproject.toml); tests/test_dockerfile.py fails when they drift.
ARG BASE=nvidia/cuda:13.0.0-cudnn-devel-ubuntu22.04
FROM ${BASE}

ARG VERL_VERSION=0.9.1
ARG TRANSFER_QUEUE_VERSION=0.1.11
ARG MLFLOW_VERSION=3.17.2
ARG CANCELCTL_VERSION=0.1.0
LABEL org.opencontainers.image.title="cancelctl" org.opencontainers.image.version="${CANCELCTL_VERSION}"

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends \
        python3.11 python3.11-venv python3.11-dev git build-essential ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# verl's vllm + mcore extras pin their own CUDA torch - let them choose it here, on GPUs.
RUN pip install "verl[vllm,mcore]==${VERL_VERSION}" "TransferQueue==${TRANSFER_QUEUE_VERSION}" "mlflow==${MLFLOW_VERSION}"

COPY pyproject.toml README.md /opt/cancelctl/
COPY cancelctl /opt/cancelctl/cancelctl
COPY losses /opt/cancelctl/losses
COPY templates /opt/cancelctl/templates
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# cancelctl's own dependencies come from its pyproject.toml (data: the rewards verl calls in the job);
# the installed torch/verl are held as they are.
RUN pip freeze | grep -iE '^(torch|verl|mlflow|transferqueue)==' > /tmp/held.txt \
    && pip install -c /tmp/held.txt "/opt/cancelctl[verl,data]" \
    && python -c "import cancelctl, verl, ray; print('cancelctl', cancelctl.__file__, 'verl', verl.__version__, 'ray', ray.__version__)"

ENV VERL_USE_EXTERNAL_PLUGINS=auto CANCELCTL_TEMPLATES=/opt/cancelctl/templates
WORKDIR /workspace
