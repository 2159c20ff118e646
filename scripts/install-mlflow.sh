#!/usr/bin/env bash
# install-mlflow.sh [--server] [--python PY] [--print-prefix]: MLflow from PyPI, cached, outside any
# existing venv. Idempotent; prints an `export ...` line for the caller to eval:
#
#     eval "$(scripts/install-mlflow.sh --python .venv/bin/python)"  # client: benchrun export --mlflow
#     eval "$(scripts/install-mlflow.sh --server)" && mlflow server --port 5000   # a tracking server
#
# - client (default): mlflow-skinny (MLflow's client: file stores and tracking servers) with
#   `pip install --target` into ${DLBENCH_CACHE:-~/.cache/dlbench}/mlflow-skinny-KEY; the packages
#   PY already has are pinned to the versions it has (pip constraints), so putting the directory on
#   PYTHONPATH changes nothing PY had. Prints `export PYTHONPATH=...`.
# - --server: full mlflow (its server, SQLite stores, the UI) in its own venv; prints
#   `export PATH=...` for a directory holding only `mlflow`.
# KEY hashes this script, the version, PY's version and (client) PY's packages: a change reinstalls.
# MLflow 3.18.0 needs mlflow-skinny 3.18.0, which our package index lacks: 3.17.2 for both.
# Exit codes: 0 ok, 1 pip failed (its last line is shown), 2 usage.
set -euo pipefail

MLFLOW_VERSION=3.17.2
me="$(basename "$0")"
python=python3
server=0
print_prefix=0
while [ $# -gt 0 ]; do
    case "$1" in
        --server) server=1 ;;
        --python) [ $# -ge 2 ] || { echo "$me: --python needs a value" >&2; exit 2; }; python="$2"; shift ;;
        --print-prefix) print_prefix=1 ;;
        *) echo "$me: unknown argument '$1' (usage: $me [--server] [--python PY] [--print-prefix])" >&2; exit 2 ;;
    esac
    shift
done
command -v "$python" >/dev/null || { echo "$me: python '$python' not found" >&2; exit 2; }

cache="${DLBENCH_CACHE:-$HOME/.cache/dlbench}"
mkdir -p "$cache"
if [ "$server" = 1 ]; then
    name=mlflow-server
    pins=""
else
    name=mlflow-skinny
    # what PY has, as pins (editable and direct-URL installs have no version to pin)
    pins="$("$python" -m pip freeze --exclude-editable 2>/dev/null | grep -E '^[A-Za-z0-9_.-]+==' || true)"
fi
key="$( { cat "${BASH_SOURCE[0]}"; echo "$MLFLOW_VERSION"; "$python" -c 'import sys; print(sys.version)'; echo "$pins"; } \
        | sha256sum | cut -c1-12)"
prefix="$cache/$name-$MLFLOW_VERSION-$key"
if [ "$print_prefix" = 1 ]; then echo "$prefix"; exit 0; fi

if [ ! -e "$prefix/.done" ]; then
    exec 9>"$prefix.lock"
    flock 9  # a parallel install (another test process) waits, then finds it done
fi
if [ ! -e "$prefix/.done" ]; then
    rm -rf "$prefix"
    trap 'rm -rf "$prefix"' EXIT  # a failed or interrupted install leaves nothing half-made
    mkdir -p "$prefix"
    if [ "$server" = 1 ]; then
        "$python" -m venv "$prefix/venv" >"$prefix/install.log" 2>&1 \
            && "$prefix/venv/bin/pip" install -q "mlflow==$MLFLOW_VERSION" >>"$prefix/install.log" 2>&1 \
            || { echo "$me: pip install mlflow==$MLFLOW_VERSION failed: $(tail -n 1 "$prefix/install.log")" >&2; exit 1; }
        mkdir -p "$prefix/bin"
        ln -s ../venv/bin/mlflow "$prefix/bin/mlflow"
    else
        echo "$pins" >"$prefix/constraints.txt"
        "$python" -m pip install -q --target "$prefix/lib" -c "$prefix/constraints.txt" \
            "mlflow-skinny==$MLFLOW_VERSION" >"$prefix/install.log" 2>&1 \
            || { echo "$me: pip install mlflow-skinny==$MLFLOW_VERSION failed: $(tail -n 1 "$prefix/install.log")" >&2; exit 1; }
    fi
    touch "$prefix/.done"  # last: its presence means "installed"
    trap - EXIT
fi
if [ "$server" = 1 ]; then
    echo "export PATH=\"$prefix/bin:\$PATH\""
else
    echo "export PYTHONPATH=\"$prefix/lib\${PYTHONPATH:+:\$PYTHONPATH}\""
fi
