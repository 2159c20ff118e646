#!/usr/bin/env bash
# install-compose-v2.sh: Docker Compose v2 (`docker compose`), the Docker CLI plugin, from Debian's
# own `docker-compose` package of a newer suite (bookworm's is v1, 1.29). Idempotent; cached outside
# the clone. Bookworm's v1 `docker-compose` command stays as it is.
#
#     scripts/install-compose-v2.sh && docker compose version
#
# - apt-get download, with a private sources list (scripts/newer-debian.sh: the system's lists stay
#   untouched), of the first of trixie and sid whose `docker-compose` is v2 and needs no newer libc
#   than the system's;
# - its plugin binary unpacked under ${DLBENCH_CACHE:-~/.cache/dlbench}/compose-VERSION, and linked
#   where the Docker CLI looks for plugins: /usr/local/lib/docker/cli-plugins as root,
#   ${DOCKER_CONFIG:-~/.docker}/cli-plugins otherwise;
# - checked: `docker compose version` names the version downloaded.
# Nothing is done when `docker compose version` already answers v2 (pass --force to replace it).
# Exit codes: 0 done; 1 a download, install step or the check failed (one line naming it); 2 usage.
set -euo pipefail

PROG=$(basename "$0")
HERE=$(cd "$(dirname "$0")" && pwd)
PLUGIN_PATH=usr/libexec/docker/cli-plugins/docker-compose  # in Debian's package

. "$HERE/newer-debian.sh"  # also die (exit 2) and fail (exit 1)

force=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
        *) die "unknown argument '$arg' (usage: $PROG [--force])" ;;
    esac
done
command -v docker >/dev/null 2>&1 || die "no docker CLI on PATH (install docker.io first)"
command -v dpkg-query >/dev/null 2>&1 || die "not a Debian system (no dpkg-query): install Compose v2 as Docker documents"
if [ "$force" = 0 ] && [[ $(docker compose version 2>/dev/null) =~ version\ v?2\. ]]; then
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    plugins=/usr/local/lib/docker/cli-plugins
else
    plugins=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins
fi
CACHE=${DLBENCH_CACHE:-$HOME/.cache/dlbench}
mkdir -p "$CACHE"
exec 9>"$CACHE/compose-v2.lock"
flock 9  # another test worker installing it: wait, then find it done
if [ "$force" = 0 ] && [[ $(docker compose version 2>/dev/null) =~ version\ v?2\. ]]; then
    exit 0
fi

WORK=$(mktemp -d "$CACHE/compose-work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
newer_apt_init "$WORK" trixie sid || exit 1
system_libc=$(dpkg-query -W -f='${Version}' libc6)
picked=
for suite in trixie sid; do
    version=$(newer_candidate docker-compose "$suite")
    [ -n "$version" ] && dpkg --compare-versions "$version" ge 2 || continue
    needs=$(newer_depends "docker-compose/$suite" libc6)
    [ -z "$needs" ] || dpkg --compare-versions "$system_libc" ge "$needs" || continue
    picked="$suite $version"
    break
done
[ -n "$picked" ] || fail "neither trixie nor sid has a docker-compose v2 that runs with this system's libc6 $system_libc"
version=${picked#* }
target=$CACHE/compose-$version
if [ ! -x "$target/docker-compose" ]; then
    (cd "$WORK" && newer_apt download "docker-compose=$version") >"$WORK/download.log" 2>&1 \
        || fail "apt-get download docker-compose=$version: $(grep -E '^(E|Err):' "$WORK/download.log" | tail -n1)"
    dpkg-deb -x "$WORK"/docker-compose_*.deb "$WORK/x" || fail "dpkg-deb -x docker-compose $version"
    [ -x "$WORK/x/$PLUGIN_PATH" ] || fail "docker-compose $version has no /$PLUGIN_PATH"
    rm -rf "$target.partial" && mkdir -p "$target.partial"
    install -m 0755 "$WORK/x/$PLUGIN_PATH" "$target.partial/docker-compose"
    rm -rf "$target" && mv "$target.partial" "$target"
fi
mkdir -p "$plugins"
ln -sfn "$target/docker-compose" "$plugins/docker-compose"
got=$(docker compose version 2>&1 || true)
case "$got" in
    *"${version%%-*}"*) echo "$PROG: Docker Compose $version (Debian ${picked% *}) in $plugins" >&2 ;;
    *) fail "docker compose version says '$(echo "$got" | tail -n1)', not $version" ;;
esac
