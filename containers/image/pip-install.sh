#!/bin/bash
# Runs inside the image build: pip-install one dependency group of dlbench
# (see pydeps.py) into /opt/venv. Offline from /wheelhouse when the build
# context has wheels there (`make wheelhouse`), otherwise from PyPI, trusting
# the optional build-secret CA bundle.
#
#   pip-install.sh GROUP...     env: PYDEPS_REPLACE="NAME=REQ ..." (optional)
set -euo pipefail
here=$(dirname "$0")

replace=()
for r in ${PYDEPS_REPLACE:-}; do replace+=(--replace "$r"); done
mapfile -t reqs < <(python3 "$here/pydeps.py" "$here/pyproject.toml" "$@" "${replace[@]}")

if [ -s /run/secrets/ca ]; then
    echo "pip-install: build secret 'ca' present ($(wc -c </run/secrets/ca) bytes)"
fi
args=(--no-cache-dir --disable-pip-version-check --no-input --progress-bar off)
if compgen -G '/wheelhouse/*.whl' >/dev/null; then
    echo "pip-install: offline, from the build context's wheelhouse/"
    args+=(--no-index --find-links /wheelhouse)
else
    echo "pip-install: online (no wheels in wheelhouse/)"
    if [ -s /run/secrets/ca ]; then
        args+=(--cert /run/secrets/ca)
    fi
fi
/opt/venv/bin/pip install "${args[@]}" "${reqs[@]}"
