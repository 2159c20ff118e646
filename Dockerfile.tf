# dlbench with TensorFlow (CPU build by default). Needs BuildKit (RUN --mount):
# build with `make image-tf` or `DOCKER_BUILDKIT=1 docker build -f Dockerfile.tf .`.
# Build args and offline/GPU builds: containers/README.md.
#
# BASE_IMAGE: any Debian/Ubuntu image with (or able to apt-get) Python >= 3.11.
#   CPU default: python:3.11-slim-bookworm. No registry: dlbench-base:bookworm
#   (`make base-image`). GPU: nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04.
ARG BASE_IMAGE=python:3.11-slim-bookworm

# ---- shared stage: byte-identical in Dockerfile.torch (tests/test_containers.py
# checks), so both images reuse one set of cached base/core layers on disk.
FROM ${BASE_IMAGE} AS core
COPY containers/image/ /opt/dlbench-build/
RUN --mount=type=secret,id=ca /opt/dlbench-build/setup-base.sh
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    HOME=/home/bench \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml /opt/dlbench-build/
RUN --mount=type=secret,id=ca --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    /opt/dlbench-build/pip-install.sh build core
# ---- end of shared stage

FROM core AS framework
# GPU TensorFlow: --build-arg TF_REQUIREMENT="tensorflow[and-cuda]==2.21.0"
# replaces the tensorflow-cpu pin of the [tf] extra.
ARG TF_REQUIREMENT=
RUN --mount=type=secret,id=ca --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    if [ -n "$TF_REQUIREMENT" ]; then export PYDEPS_REPLACE="tensorflow-cpu=$TF_REQUIREMENT"; fi \
    && /opt/dlbench-build/pip-install.sh tf

FROM framework
# ---- late layer: byte-identical in Dockerfile.tf, Dockerfile.torch and containers/horovod/Dockerfile
# (tests/test_containers.py checks). Fashion-MNIST and the light Python dependencies of
# containers/late/, from their own wheel directory: changing them rebuilds this layer only.
COPY containers/late/ /opt/dlbench-late/
RUN --mount=type=secret,id=ca --mount=type=bind,source=wheelhouse-late,target=/wheelhouse \
    /opt/dlbench-late/install.sh
# ---- end of late layer
# Source last: editing benchmarks/ rebuilds only these small layers.
COPY pyproject.toml README.md* /opt/dlbench-src/
COPY benchmarks/ /opt/dlbench-src/benchmarks/
RUN pip install --no-cache-dir --no-deps --no-build-isolation /opt/dlbench-src \
    && rm -rf /opt/dlbench-src/build \
    && pip check
ARG BASE_IMAGE
ARG IMAGE_NAME=dlbench-tensorflow:latest
ARG DLBENCH_VERSION=unknown
ARG VCS_URL=unknown
ARG VCS_REF=unknown
# Default mirrors the [tf] pin in pyproject.toml (a test keeps them equal).
ARG TENSORFLOW_VERSION=2.21.0
LABEL org.opencontainers.image.title="dlbench-tensorflow" \
      org.opencontainers.image.description="dlbench training benchmark, TensorFlow" \
      org.opencontainers.image.source="${VCS_URL}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.version="${DLBENCH_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      io.dlbench.framework="tensorflow" \
      io.dlbench.tensorflow.version="${TENSORFLOW_VERSION}"
# NVIDIA_*: Enroot, Pyxis and the CSCS Container Engine inject the GPU driver only when the
# image asks for it (nvidia-container-toolkit semantics; hosts without NVIDIA hooks ignore them).
ENV BENCH_FRAMEWORK=tensorflow \
    BENCH_IMAGE=${IMAGE_NAME} \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
# Enroot/Pyxis start the command through a login shell by default, and Debian's /etc/profile
# resets PATH: put the venv (bench) back in front for such shells.
RUN echo 'export PATH=/opt/venv/bin:$PATH' > /etc/profile.d/dlbench-venv.sh
USER bench
WORKDIR /results
ENTRYPOINT ["bench"]
