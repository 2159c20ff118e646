#!/usr/bin/env bash
# install-reframe.sh [--print-prefix]: ReFrame from PyPI in its own cached venv (scripts/pip-cached.sh).
# Idempotent; prints an `export PATH=...` line for the caller to eval, naming a directory that holds
# only `reframe` (bench and benchrun keep running where they ran before):
#
#     eval "$(scripts/install-reframe.sh)" && reframe -C reframe-checks/site/settings.py -c reframe-checks -l
#
# Exit codes: 0 ok, 1 pip failed (its last line is shown), 2 usage.
set -euo pipefail

REFRAME_VERSION=4.10.4
case "${1:-}" in
    ''|--print-prefix) ;;
    *) echo "$(basename "$0"): unknown argument '$1' (usage: $(basename "$0") [--print-prefix])" >&2; exit 2 ;;
esac
PIP_CACHED_CALLER="$(basename "$0")" exec "$(dirname "$0")/pip-cached.sh" venv "reframe-hpc==$REFRAME_VERSION" reframe "$@"
