#!/usr/bin/env bash
# Build a local base image from Debian packages, for sites (and our CI) that
# reach no container registry: debootstrap minbase bookworm -> tar -> docker import.
# The result is accepted by Dockerfile.tf / Dockerfile.torch as BASE_IMAGE.
#
#   containers/base/build.sh [IMAGE]      (default dlbench-base:bookworm)
#
# Env: DEBIAN_MIRROR (default http://deb.debian.org/debian), FORCE=1 to rebuild
# an existing image. Needs root and debootstrap (apt-get install debootstrap).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

image=${1:-dlbench-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm

require_daemon
if image_exists "$image" && [ "${FORCE:-0}" != 1 ]; then
    note "$image exists (FORCE=1 rebuilds it)"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "debootstrap needs root"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap is not installed (apt-get install debootstrap)"

work=$(mktemp -d /var/tmp/dlbench-base.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root
start=$(date +%s)
# python3-venv brings ensurepip, so the images can make their own venv without
# pip from the network; ca-certificates lets pip/apt talk HTTPS.
if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1; then
    die "debootstrap $suite from $mirror failed: $(grep -m1 -E '^(E|W):' "$work/debootstrap.log" || tail -n1 "$work/debootstrap.log")"
fi
cat >"$root/etc/apt/sources.list" <<SRC
deb $mirror $suite main
deb $mirror $suite-updates main
deb http://deb.debian.org/debian-security $suite-security main
SRC
# debootstrap leaves the .debs and package lists behind; images need neither.
# ./dev/* must not be archived (device nodes; /dev/full has filled disks before).
tar -C "$root" --numeric-owner \
    --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
    --exclude='./var/cache/apt/archives/*.deb' --exclude='./var/lib/apt/lists/*' \
    --exclude='./var/log/*' --exclude='./tmp/*' \
    -c . |
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        --change "LABEL org.opencontainers.image.description=\"Debian $suite minbase + python3 (debootstrap), dlbench local base\"" \
        --change "LABEL org.opencontainers.image.created=\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"" \
        - "$image" >/dev/null
note "built $image in $(( $(date +%s) - start )) s ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}'))"
