#!/usr/bin/env bash
# Make sure a Docker daemon answers; start one if none runs. Shared by ci.sh and
# the pytest suite so both bring Docker up the same way. Idempotent.
#
#   containers/dockerd.sh [--install]
#   DOCKER_HOST=unix:///tmp/x/docker.sock containers/dockerd.sh --root DIR
#
# --install: apt-get docker.io + docker-compose when dockerd is absent (root).
# --root DIR: a private daemon beside the shared one (tests that stop or kill a
#   daemon must never touch the one others use): on the socket DOCKER_HOST names,
#   with its data and exec roots, pid file (DIR/dockerd.pid) and log
#   (DIR/dockerd.log) under DIR, a bridge of its own (dlbXXXXXXXX) and no iptables
#   rules (containers use the host network). Its images survive a restart; so does DIR between runs.
# The daemon's log goes to $DLBENCH_DOCKERD_LOG (default /var/log/dlbench-dockerd.log).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

install=0
root=
while [ "$#" -gt 0 ]; do
    case "$1" in
        --install) install=1 ;;
        --root) [ "$#" -ge 2 ] || die "--root needs a directory"; root=$2; shift ;;
        *) die "unknown option '$1' (valid: --install, --root DIR)" ;;
    esac
    shift
done
if [ -n "$root" ]; then
    case "${DOCKER_HOST:-}" in
        unix:///*) ;;
        *) die "--root needs DOCKER_HOST=unix:///PATH/docker.sock naming the private daemon's socket (got '${DOCKER_HOST:-}')" ;;
    esac
    [ "$DOCKER_HOST" != unix:///var/run/docker.sock ] || die "--root: DOCKER_HOST names the shared daemon's socket; give a private one"
fi

if docker info >/dev/null 2>&1; then
    exit 0
fi

if [ -n "${DOCKER_HOST:-}" ] && [ "${DOCKER_HOST#unix://}" = "$DOCKER_HOST" ]; then
    die "DOCKER_HOST=$DOCKER_HOST does not answer and is not a local socket we could start"
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker-compose >/dev/null 2>&1; then
    [ "$install" = 1 ] || command -v dockerd >/dev/null 2>&1 || die "dockerd is not installed (run: containers/dockerd.sh --install, or apt-get install docker.io)"
    if [ "$install" = 1 ]; then
        [ "$(id -u)" = 0 ] || die "installing docker.io needs root"
        command -v apt-get >/dev/null 2>&1 || die "dockerd is absent and this is not a Debian/Ubuntu system (no apt-get)"
        note "installing docker.io docker-compose (apt-get)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null
        apt-get install -y -qq docker.io docker-compose >/dev/null
    fi
fi

if docker info >/dev/null 2>&1; then
    exit 0   # the package install may have started it
fi

[ "$(id -u)" = 0 ] || die "no Docker daemon answers and starting dockerd needs root"

sock=${DOCKER_HOST:-unix:///var/run/docker.sock}
sock=${sock#unix://}
log=${DLBENCH_DOCKERD_LOG:-/var/log/dlbench-dockerd.log}
options=()
if [ -n "$root" ]; then
    mkdir -p "$root" "$(dirname "$sock")"
    log=$root/dockerd.log
    # Its own bridge, never --bridge=none: a daemon without a bridge deletes the interface
    # docker0 at start-up (libnetwork's removeDefaultBridgeInterface), breaking the shared daemon.
    hash=$(printf '%s' "$root" | cksum | cut -d' ' -f1)
    bridge=dlb$(printf '%08x' "$hash")
    if ! ip link show "$bridge" >/dev/null 2>&1; then
        ip link add "$bridge" type bridge
        ip addr add "10.213.$((hash % 250)).1/24" dev "$bridge"
    fi
    ip link set "$bridge" up
    options=(--data-root "$root/data" --exec-root "$root/exec" --pidfile "$root/dockerd.pid"
             --bridge="$bridge" --iptables=false --ip-masq=false)
fi
# running: a process that is not a zombie (a killed daemon may wait long for init to reap it)
running() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}
# A crashed daemon's pid files (its own, its containerd's): dockerd refuses to start, or waits for a
# containerd that will never answer, while those pids have a /proc entry, zombies included.
for pidfile in "$root/dockerd.pid" "$root/exec/containerd/containerd.pid"; do
    if [ -n "$root" ] && [ -f "$pidfile" ] && ! running "$(cat "$pidfile")"; then
        rm -f "$pidfile"
    fi
done
if [ -n "$root" ] && [ -f "$root/dockerd.pid" ]; then
    note "the private dockerd of $root exists but does not answer yet; waiting"
elif [ -z "$root" ] && pgrep -x dockerd >/dev/null 2>&1; then
    note "a dockerd process exists but does not answer yet; waiting"
else
    note "starting dockerd (log: $log)"
    # setsid: the daemon must outlive this script and the CI step that ran it.
    setsid dockerd -H "unix://$sock" "${options[@]}" >>"$log" 2>&1 </dev/null &
fi
for _ in $(seq 1 150); do
    if [ -S "$sock" ] && docker info >/dev/null 2>&1; then
        exit 0
    fi
    sleep 0.2
done
die "dockerd did not answer on $sock within 30 s (see $log)"
