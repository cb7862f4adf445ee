# syntax=docker/dockerfile:1
#
# notification-controller image: `docker build -t notification-controller:latest .`
#
# Two stages. The builder turns the source tree into wheels (ours and every dependency, so the
# runtime installs offline and reproducibly). The runtime installs only those wheels, keeps no
# source tree, no wheels and no build tools, and runs as nobody (65534) with an exec-form
# ENTRYPOINT: no shell is involved at runtime. config/manager/deployment.yaml runs it with a
# read-only root filesystem and an emptyDir on /tmp.

FROM python:3.11-slim-bookworm AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY notification_controller ./notification_controller
RUN pip wheel --wheel-dir /wheels ".[speed,nats,tracing]"

FROM python:3.11-slim-bookworm AS runtime
# `make image` passes pyproject's version (the one `notification-controller --version` and /metrics report).
ARG VERSION=unknown
LABEL org.opencontainers.image.title="notification-controller" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.description="A drop-in, asyncio re-implementation of Flux's notification-controller" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Byte-code is compiled here, at install time, because the root filesystem is read-only at runtime.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "notification-controller[speed,nats,tracing]" \
    && { [ "$VERSION" = unknown ] || [ "$(notification-controller --version | cut -d' ' -f2)" = "$VERSION" ]; } \
    && pip uninstall --yes pip setuptools wheel
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 65534:65534
# events (9090), webhook receiver (9292), metrics (8080), health probes (9440): reference §7
EXPOSE 9090 9292 8080 9440
ENTRYPOINT ["notification-controller"]
