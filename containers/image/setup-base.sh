#!/bin/bash
# Runs inside the image build (shared stage of Dockerfile.tf and Dockerfile.torch):
# a Python >= 3.11 venv in /opt/venv and the non-root user `bench` (uid 1000).
# Works on python:3.11-slim, the debootstrap base and CUDA Ubuntu 24.04 bases.
set -euo pipefail

# An extra CA bundle from the build secret `ca` (proxied networks) is used for
# this RUN only: /run/secrets is a tmpfs mount, never part of a layer.
if [ -s /run/secrets/ca ]; then
    export SSL_CERT_FILE=/run/secrets/ca
fi

have_python() {
    command -v python3 >/dev/null 2>&1 &&
        python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}
if ! have_python; then
    # CUDA bases ship no Python; apt over http needs no certificates.
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates >/dev/null
    rm -rf /var/lib/apt/lists/*
    have_python || { echo "setup-base: need Python >= 3.11 with venv in BASE_IMAGE" >&2; exit 1; }
fi

python3 -m venv /opt/venv

# Fashion-MNIST for time-to-accuracy runs (bench --target-accuracy): Debian's dataset-fashion-mnist
# (31 MB of gzip IDX files in /usr/share/datasets/fashion-mnist). A base whose apt sources lack it
# (Ubuntu without universe) still builds; bench then says, in one line, how to get the data.
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends dataset-fashion-mnist >/dev/null; }; then
    echo "setup-base: warning: dataset-fashion-mnist is not installable from this base's apt sources" >&2
fi
rm -rf /var/lib/apt/lists/*

# uid 1000 is taken by `ubuntu` on Ubuntu 24.04 bases: rename it rather than
# pick another uid, so volume permissions are the same on every base.
existing=$(getent passwd 1000 | cut -d: -f1 || true)
if [ -n "$existing" ] && [ "$existing" != bench ]; then
    usermod -l bench -d /home/bench -m "$existing"
    groupmod -n bench "$(id -gn bench)" 2>/dev/null || true
elif [ -z "$existing" ]; then
    groupadd --gid 1000 bench
    useradd --uid 1000 --gid 1000 --create-home --home-dir /home/bench --shell /bin/bash bench
fi
mkdir -p /results /data
chown bench:bench /results
