# The cluster image for `backend: verl` runs: verl 0.9.1 with vLLM and Megatron-core on CUDA, plus
# cancelctl (whose `losses` register in verl through the `verl.plugins` entry point).
# Build:  docker build -t cancelctl:verl-0.9.1 .
# Use:    cluster: {container_image: cancelctl:verl-0.9.1, container_runtime: pyxis}   (or an
#         apptainer .sif built from this image with `apptainer build cancelctl.sif docker-daemon://cancelctl:verl-0.9.1`)
ARG BASE=nvidia/cuda:13.0.0-cudnn-devel-ubuntu22.04
FROM ${BASE}

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1
RUN apt-get update && apt-get install -y --no-install-recommends \
        python3.11 python3.11-venv python3.11-dev git build-essential ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# verl's vllm + mcore extras pin their own CUDA torch (2.11) - let them choose it here, on GPUs.
RUN pip install --upgrade pip && pip install "verl[vllm,mcore]==0.9.1" "mlflow==3.17.2"

COPY pyproject.toml README.md /opt/cancelctl/
COPY cancelctl /opt/cancelctl/cancelctl
COPY losses /opt/cancelctl/losses
COPY templates /opt/cancelctl/templates
# --no-deps keeps verl's torch; the remaining light dependencies are installed explicitly.
RUN pip install --no-deps /opt/cancelctl \
    && pip install "pydantic>=2.6" "pyyaml>=6" "typer>=0.12" "rich>=13" "submitit>=1.5" "jinja2>=3.1" matplotlib pandas

ENV VERL_USE_EXTERNAL_PLUGINS=auto CANCELCTL_TEMPLATES=/opt/cancelctl/templates
WORKDIR /workspace
