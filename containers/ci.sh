#!/usr/bin/env bash
# CI for the containers (called from .ci/run; also `make containers-ci`).
# Idempotent: reruns on the same machine reuse the daemon, the base image, the
# wheelhouse and the BuildKit layer cache.
#
#   1. Docker: install docker.io + docker-compose if absent, start dockerd if none runs
#   2. base image from Debian packages (no registry needed), wheelhouse (offline pip)
#   3. both images, then the container tests (pytest): --help/--version, labels,
#      layer sharing, CA secret not left behind, bad-input errors, and
#      `docker-compose run --rm {tf,torch}-bench --model resnet50 ... --json`
#      records (status ok, runtime docker, image set)
#
# Env: PYTHON (needs pytest, pyyaml, spython; default: the project venv
# python if found, else python3), BASE_IMAGE (default dlbench-base:bookworm),
# WHEELHOUSE=0 to build from PyPI instead (CA_CERT=... behind a TLS proxy).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$DLBENCH_ROOT"

if [ -z "${PYTHON:-}" ]; then
    PYTHON=python3
    for py in "$HOME"/.cache/dlbench/venv-*/bin/python; do
        [ -x "$py" ] && PYTHON=$py
    done
fi
"$PYTHON" -c 'import pytest, yaml, spython' 2>/dev/null ||
    die "PYTHON=$PYTHON lacks pytest/pyyaml/spython (create the dev venv: pip install -r requirements-dev.txt)"
export BASE_IMAGE=${BASE_IMAGE:-dlbench-base:bookworm}

t0=$(date +%s)
step() { note "[$(( $(date +%s) - t0 )) s] $*"; }

step "docker daemon"
"$DLBENCH_ROOT/containers/dockerd.sh" --install
docker-compose version --short >/dev/null 2>&1 || docker compose version >/dev/null 2>&1 ||
    die "no docker compose after install"

free_gb=$(df -Pk "$(docker info -f '{{.DockerRootDir}}')" | awk 'NR==2 {print int($4/1048576)}')
step "free disk for Docker: ${free_gb} GB"
[ "$free_gb" -ge 12 ] || die "only ${free_gb} GB free for Docker; the images need ~12 GB (docker system df; docker image prune)"

if [ "$BASE_IMAGE" = dlbench-base:bookworm ] && ! command -v debootstrap >/dev/null 2>&1; then
    step "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
fi

if [ "${WHEELHOUSE:-1}" != 0 ]; then
    step "wheelhouse"
    make -s -f containers/images.mk wheelhouse PYTHON="$PYTHON"
fi

step "images (base: $BASE_IMAGE)"
make -s -f containers/images.mk images BASE_IMAGE="$BASE_IMAGE" CA_CERT="${CA_CERT:-}"

step "container tests"
DLBENCH_TEST_BASE_IMAGE="$BASE_IMAGE" "$PYTHON" -m pytest -q -p no:cacheprovider \
    tests/test_containers.py tests/test_singularity_def.py

prune_stale_images
step "done"
docker system df
