#!/usr/bin/env bash
# install-udocker.sh [--print-prefix]: udocker for this user, without an admin's help beyond two
# Debian packages. Idempotent; prints `export ...` lines for the caller to eval:
#
#     eval "$(scripts/install-udocker.sh)" && udocker version
#
# What it does (facts in shared/hpc-runtimes.md, "udocker"):
# - udocker 1.3.17 from PyPI in a venv under ${DLBENCH_CACHE:-~/.cache/dlbench}/udocker-KEY
#   (outside the clone; KEY hashes this script and the Python version, so a change reinstalls);
# - Debian's proot and runc (apt, only when missing and only as root; NEEDRESTART_SUSPEND=1 so
#   needrestart does not queue a restart of a running dockerd): udocker's own tool tarball is
#   downloaded from outside our registries, which fails here;
# - a `udocker` wrapper in PREFIX/bin that points udocker at those binaries
#   (UDOCKER_USE_PROOT_EXECUTABLE, UDOCKER_USE_RUNC_EXECUTABLE), uses $UDOCKER_DIR (default
#   ~/.udocker) and writes UDOCKER_DIR/lib/VERSION, which stops udocker's download attempts;
# - a tiny proot wrapper that drops udocker's `-k RELEASE`: with it Debian's proot 5.1.0 fails
#   (`libm.so.6: cannot stat shared object: Invalid argument`).
# Exit codes: 0 ok, 1 an install step failed, 2 usage or a missing package a non-root user
# cannot install.
set -euo pipefail

UDOCKER_VERSION=1.3.17
TOOLS_VERSION=1.2.11  # what udocker 1.3.17 expects in lib/VERSION to consider its tools installed
PACKAGES=(proot runc)
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
me="$(basename "$0")"

print_prefix=0
for arg in "$@"; do
    case "$arg" in
        --print-prefix) print_prefix=1 ;;
        *) echo "$me: unknown argument '$arg' (usage: $me [--print-prefix])" >&2; exit 2 ;;
    esac
done

python="$(command -v python3 || true)"
[ -n "$python" ] || { echo "$me: python3 not found (needed for udocker's venv)" >&2; exit 2; }
key="$( { cat "${BASH_SOURCE[0]}"; echo "$UDOCKER_VERSION"; "$python" -c 'import sys; print(sys.version)'; } \
        | sha256sum | cut -c1-12)"
prefix="${DLBENCH_CACHE:-$HOME/.cache/dlbench}/udocker-$key"
if [ "$print_prefix" = 1 ]; then echo "$prefix"; exit 0; fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" = "install ok installed" ] || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "$me: Debian packages missing: ${missing[*]} (ask an admin: apt-get install ${missing[*]}; or run as root)" >&2
        exit 2
    fi
    NEEDRESTART_SUSPEND=1 "$HERE/ensure-packages.sh" "${missing[@]}" || exit 1
fi

if [ ! -x "$prefix/bin/udocker" ]; then
    mkdir -p "$(dirname "$prefix")"
    exec 9>"$prefix.lock"
    flock 9  # a parallel install (another test process) waits, then finds it done
fi
if [ ! -x "$prefix/bin/udocker" ]; then
    rm -rf "$prefix"
    trap 'rm -rf "$prefix"' EXIT  # a failed or interrupted install leaves nothing half-made
    mkdir -p "$prefix/bin"
    if ! { "$python" -m venv "$prefix/venv" && "$prefix/venv/bin/pip" install -q "udocker==$UDOCKER_VERSION"; } \
            >"$prefix/install.log" 2>&1; then
        echo "$me: pip install udocker==$UDOCKER_VERSION failed: $(tail -n 1 "$prefix/install.log")" >&2
        exit 1
    fi
    cat >"$prefix/bin/proot" <<'EOF'
#!/usr/bin/env bash
# Debian's proot without udocker's "-k RELEASE" (proot 5.1.0 fails with it; see install-udocker.sh)
args=()
dropped=0
while [ $# -gt 0 ]; do
    if [ "$dropped" = 0 ] && [ "$1" = -k ] && [ $# -ge 2 ]; then shift 2; dropped=1; continue; fi
    args+=("$1"); shift
done
exec /usr/bin/proot "${args[@]}"
EOF
    cat >"$prefix/bin/udocker.partial" <<EOF
#!/usr/bin/env bash
# udocker $UDOCKER_VERSION (PyPI) with Debian's proot and runc (written by install-udocker.sh)
export UDOCKER_DIR="\${UDOCKER_DIR:-\$HOME/.udocker}"
export UDOCKER_USE_PROOT_EXECUTABLE="\${UDOCKER_USE_PROOT_EXECUTABLE:-$prefix/bin/proot}"
export UDOCKER_USE_RUNC_EXECUTABLE="\${UDOCKER_USE_RUNC_EXECUTABLE:-$(command -v runc || echo /usr/sbin/runc)}"
if [ ! -s "\$UDOCKER_DIR/lib/VERSION" ]; then  # udocker's tools count as installed: no download attempts
    mkdir -p "\$UDOCKER_DIR/lib" && echo $TOOLS_VERSION >"\$UDOCKER_DIR/lib/VERSION"
fi
exec "$prefix/venv/bin/udocker" "\$@"
EOF
    chmod 755 "$prefix/bin/proot" "$prefix/bin/udocker.partial"
    mv "$prefix/bin/udocker.partial" "$prefix/bin/udocker"  # last: its presence means "installed"
    trap - EXIT
fi
echo "export PATH=\"$prefix/bin:\$PATH\""
