#!/usr/bin/env bash
# ensure-packages.sh PKG... : install the given Debian packages only when they
# are missing. Idempotent; runs `apt-get update` at most once per run, and only
# when something has to be installed. Quiet: apt output goes to a log file that
# is printed only on failure.
set -euo pipefail

usage() { echo "usage: $(basename "$0") PKG [PKG...]" >&2; exit 2; }

[ "$#" -ge 1 ] || usage
for pkg in "$@"; do
    case "$pkg" in
        -h|--help) usage ;;
        -*) echo "$(basename "$0"): unknown option '$pkg' (usage: $(basename "$0") PKG [PKG...])" >&2; exit 2 ;;
        *[!a-zA-Z0-9.+:-]*) echo "$(basename "$0"): invalid package name '$pkg'" >&2; exit 2 ;;
    esac
done

installed() {
    # dpkg-query prints "install ok installed" only for fully installed packages.
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

missing=()
for pkg in "$@"; do
    installed "$pkg" || missing+=("$pkg")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "$(basename "$0"): need root to install: ${missing[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
log="$(mktemp /tmp/ensure-packages.XXXXXX.log)"
trap 'rm -f "$log"' EXIT

run() {
    if ! "$@" >>"$log" 2>&1; then
        echo "$(basename "$0"): failed: $*" >&2
        tail -n 20 "$log" >&2
        exit 1
    fi
}

# Another apt/dpkg (a parallel build) may hold the locks: wait for them.
APT_OPTS=(-q -o DPkg::Lock::Timeout=300)

echo "ensure-packages: installing ${missing[*]}" >&2
# apt-get update does not honour DPkg::Lock::Timeout for its lists lock: retry.
for attempt in 1 2 3 4 5 6; do
    if apt-get "${APT_OPTS[@]}" update >>"$log" 2>&1; then break; fi
    if [ "$attempt" = 6 ] || ! grep -q "Could not get lock" "$log"; then
        echo "$(basename "$0"): failed: apt-get update" >&2
        tail -n 20 "$log" >&2
        exit 1
    fi
    sleep 10
done
run apt-get "${APT_OPTS[@]}" install -y --no-install-recommends "${missing[@]}"

for pkg in "${missing[@]}"; do
    installed "$pkg" || { echo "$(basename "$0"): $pkg still not installed" >&2; exit 1; }
done
