#!/usr/bin/env bash
# install-mlflow.sh [--server] [--python PY] [--print-prefix]: MLflow from PyPI, cached, outside any
# existing venv (scripts/pip-cached.sh). Idempotent; prints an `export ...` line for the caller to eval:
#
#     eval "$(scripts/install-mlflow.sh --python .venv/bin/python)"  # client: benchrun export --mlflow
#     eval "$(scripts/install-mlflow.sh --server)" && mlflow server --port 5000   # a tracking server
#
# - client (default): mlflow-skinny (MLflow's client: tracking servers and file stores), installed for
#   PY (default python3) into a directory for PYTHONPATH, PY's own packages pinned to what PY has;
# - --server: full mlflow (its server, SQLite stores, the UI) in a venv of its own; prints a PATH line
#   for a directory holding only `mlflow`.
# MLflow 3.18.0 needs mlflow-skinny 3.18.0, which our package index lacks: 3.17.2 for both.
# Exit codes: 0 ok, 1 pip failed (its last line is shown), 2 usage.
set -euo pipefail

MLFLOW_VERSION=3.17.2
me="$(basename "$0")"
python=python3
server=0
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --server) server=1 ;;
        --python) [ $# -ge 2 ] || { echo "$me: --python needs a value" >&2; exit 2; }; python="$2"; shift ;;
        --print-prefix) extra=(--print-prefix) ;;
        *) echo "$me: unknown argument '$1' (usage: $me [--server] [--python PY] [--print-prefix])" >&2; exit 2 ;;
    esac
    shift
done
export PIP_CACHED_CALLER="$me"
if [ "$server" = 1 ]; then
    exec "$(dirname "$0")/pip-cached.sh" venv "mlflow==$MLFLOW_VERSION" mlflow "${extra[@]}"
fi
exec "$(dirname "$0")/pip-cached.sh" target "mlflow-skinny==$MLFLOW_VERSION" "$python" "${extra[@]}"
