#!/usr/bin/env bash
# pip-cached.sh venv REQUIREMENT COMMAND | target REQUIREMENT PYTHON: a PyPI package installed once,
# cached outside any clone and outside any existing venv, for the install-*.sh scripts:
#
#   venv:   REQUIREMENT in a venv of its own; prints `export PATH="DIR:$PATH"` for a directory that
#           holds only COMMAND (the venv's python3 stays off PATH);
#   target: REQUIREMENT with `pip install --target` for PYTHON, the packages PYTHON already has pinned
#           to the versions it has (pip constraints), so that putting the directory on PYTHONPATH
#           changes nothing PYTHON had; prints `export PYTHONPATH="DIR${PYTHONPATH:+:...}"`.
#
# The directory is ${DLBENCH_CACHE:-~/.cache/dlbench}/NAME-VERSION-KEY, KEY hashing this script, the
# requirement, the Python version and (target) PYTHON's packages: a change reinstalls. One process
# installs at a time (flock); a failed or interrupted install leaves nothing. `--print-prefix` after
# the arguments prints the directory only. Exit codes: 0 ok, 1 pip failed (its last line is shown), 2 usage.
set -euo pipefail

me="${PIP_CACHED_CALLER:-$(basename "$0")}"
usage="usage: $(basename "$0") venv REQUIREMENT COMMAND | target REQUIREMENT PYTHON [--print-prefix]"
[ $# -ge 3 ] || { echo "$me: $usage" >&2; exit 2; }
mode="$1" requirement="$2" third="$3"
print_prefix=0
[ "${4:-}" = --print-prefix ] && print_prefix=1
case "$mode" in
    venv) python="$(command -v python3 || true)" ;;
    target) python="$third" ;;
    *) echo "$me: $usage" >&2; exit 2 ;;
esac
[ -n "$python" ] && command -v "$python" >/dev/null || { echo "$me: python '${python:-python3}' not found" >&2; exit 2; }

pins=""
if [ "$mode" = target ]; then  # editable and direct-URL installs have no version to pin
    pins="$("$python" -m pip freeze --exclude-editable 2>/dev/null | grep -E '^[A-Za-z0-9_.-]+==' || true)"
fi
# Not PYTHON's path (each clone's .venv names the same venv): its version and packages are what matter.
command_name=""
[ "$mode" = venv ] && command_name="$third"
key="$( { cat "${BASH_SOURCE[0]}"; echo "$mode $requirement $command_name"; "$python" -c 'import sys; print(sys.version)'
          echo "$pins"; } | sha256sum | cut -c1-12)"
cache="${DLBENCH_CACHE:-$HOME/.cache/dlbench}"
prefix="$cache/${requirement/==/-}-$key"
if [ "$print_prefix" = 1 ]; then echo "$prefix"; exit 0; fi

mkdir -p "$cache"
if [ ! -e "$prefix/.done" ]; then
    exec 9>"$prefix.lock"
    flock 9  # a parallel install (another test process) waits, then finds it done
fi
if [ ! -e "$prefix/.done" ]; then
    rm -rf "$prefix"
    trap 'rm -rf "$prefix"' EXIT
    mkdir -p "$prefix"
    log="$prefix/install.log"
    if [ "$mode" = venv ]; then
        "$python" -m venv "$prefix/venv" >"$log" 2>&1 && "$prefix/venv/bin/pip" install -q "$requirement" >>"$log" 2>&1 \
            || { echo "$me: pip install $requirement failed: $(tail -n 1 "$log")" >&2; exit 1; }
        mkdir -p "$prefix/bin"
        ln -s "../venv/bin/$third" "$prefix/bin/$third"
    else
        echo "$pins" >"$prefix/constraints.txt"
        "$python" -m pip install -q --target "$prefix/lib" -c "$prefix/constraints.txt" "$requirement" >"$log" 2>&1 \
            || { echo "$me: pip install $requirement failed: $(tail -n 1 "$log")" >&2; exit 1; }
    fi
    touch "$prefix/.done"  # last: its presence means "installed"
    trap - EXIT
fi
if [ "$mode" = venv ]; then
    echo "export PATH=\"$prefix/bin:\$PATH\""
else
    echo "export PYTHONPATH=\"$prefix/lib\${PYTHONPATH:+:\$PYTHONPATH}\""
fi
