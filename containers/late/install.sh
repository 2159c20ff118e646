#!/bin/bash
# Runs inside the image builds (Dockerfile.tf, Dockerfile.torch, containers/horovod/Dockerfile), as
# their late layer: Debian's Fashion-MNIST for time-to-accuracy runs, and requirements.txt here into
# /opt/venv (offline from /wheelhouse when the build context's wheelhouse-late/ has wheels, else
# PyPI, trusting the optional build-secret CA bundle).
set -euo pipefail
here=$(dirname "$0")

# 31 MB of gzip IDX files in /usr/share/datasets/fashion-mnist (bench --target-accuracy's default).
# A base whose apt sources lack the package (Ubuntu without universe) still builds: bench then
# says in one line how to get the data, and benchrun mounts a host's copy.
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends dataset-fashion-mnist >/dev/null; }; then
    echo "late layer: warning: dataset-fashion-mnist is not installable from this base's apt sources" >&2
fi
apt-get clean   # the .deb and apt's package caches: 106 MB of the layer otherwise
rm -rf /var/lib/apt/lists/*

args=(--no-cache-dir --disable-pip-version-check --no-input --progress-bar off)
if compgen -G '/wheelhouse/*.whl' >/dev/null; then
    echo "late layer: offline, from the build context's wheelhouse-late/"
    args+=(--no-index --find-links /wheelhouse)
elif [ -s /run/secrets/ca ]; then
    args+=(--cert /run/secrets/ca)
fi
/opt/venv/bin/pip install "${args[@]}" -r "$here/requirements.txt"
