# One image, three entry points (see docs/contracts.md):
#   gpu-auditor-agent     the node agent (DaemonSet)
#   gpu-auditor-operator  the kopf operator (Deployment)
#   gpu-auditor-webhook   the admission webhooks (Deployment)
# plus the gpu-auditor CLI, and the OOM probe's files under /opt/gpu-auditor/probe (the
# injected init container copies them into a job's pod). The chart sets the command of each
# container.
#
#   docker build -t ghcr.io/gpu-auditor/gpu-auditor:0.1.0 .
ARG PYTHON_IMAGE=python:3.12-slim

# ---- stage 1: build the wheel (no dependencies; the next stage resolves them) ----
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY node_agent/ node_agent/
RUN pip wheel --no-deps --wheel-dir /wheels .

# ---- stage 2: the runtime image ----
FROM ${PYTHON_IMAGE} AS runtime
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
# The wheel with both services' extras (`pip install gpu-auditor` alone is the CLI and the
# core, with no dependency) and their dependencies (kopf's aiohttp wheels; the agent's
# nvidia-ml-py, h2, protobuf and PyYAML: docs/dependencies.md),
# byte-compiled at install time so nothing is written at run time (the pods run with a
# read-only root filesystem). `echo` expands the wheel's glob, which pip's `file[extras]`
# form does not.
COPY --from=build /wheels /tmp/wheels
RUN pip install "$(echo /tmp/wheels/gpu_auditor-*.whl)[agent,operator]" \
 && rm -rf /tmp/wheels \
 && gpu-auditor-agent --help > /dev/null \
 && gpu-auditor-operator --help > /dev/null \
 && gpu-auditor-webhook --help > /dev/null
# The OOM probe (probe/README.md): its sitecustomize and package, pure Python, world-readable;
# the job's own interpreter runs them, never this image's.
COPY probe/sitecustomize.py /opt/gpu-auditor/probe/
COPY probe/gpu_auditor_probe/ /opt/gpu-auditor/probe/gpu_auditor_probe/
# Nothing to write at run time: the bytecode is already there.
ENV PYTHONDONTWRITEBYTECODE=1
# A fixed non-root user; uid/gid 65532 as in distroless "nonroot". The agent's DaemonSet runs
# it as uid 0 without capabilities (the kubelet's pod-resources socket is root's).
RUN groupadd --system --gid 65532 nonroot \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin nonroot
USER 65532:65532
WORKDIR /
# agent /metrics and /healthz, operator /metrics, operator liveness /healthz, webhook HTTPS
# and /metrics
EXPOSE 9401 9402 8080 8443 9403
LABEL org.opencontainers.image.title="gpu-auditor" \
      org.opencontainers.image.description="Kubernetes GPU auditor: node agent, operator, admission webhooks" \
      org.opencontainers.image.source="https://github.com/gpu-auditor/gpu-auditor" \
      org.opencontainers.image.licenses="Apache-2.0"
CMD ["gpu-auditor", "--help"]
