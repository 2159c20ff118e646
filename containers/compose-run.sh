#!/usr/bin/env bash
# `compose run --rm -T SERVICE ARGS...` with the checks Compose leaves to a
# traceback: unknown service, missing image (Compose v1 would try to build it
# without BuildKit and fail), daemon down.
#
#   containers/compose-run.sh SERVICE [bench args...]
#
# Env: COMPOSE (default: `docker compose` if v2 is present, else docker-compose),
#      COMPOSE_FILE (e.g. docker-compose.yml:docker-compose.gpu.yml).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$DLBENCH_ROOT"

service=${1:-}
[ $# -gt 0 ] && shift

if [ -n "${COMPOSE:-}" ]; then
    read -r -a compose <<<"$COMPOSE"
elif docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    compose=(docker-compose)
else
    die "neither 'docker compose' (v2) nor docker-compose (v1) is installed (apt-get install docker-compose)"
fi

if ! config=$("${compose[@]}" config 2>&1); then
    die "compose file is invalid: $(sed -n '/[^[:space:]]/{p;q}' <<<"$config" | cut -c1-160)"
fi
known=$("${compose[@]}" config --services | sort)
services=$(printf '%s\n' "$known" | paste -sd, - | sed 's/,/, /g')
[ -n "$service" ] || die "missing service name (valid: $services)"
grep -qxF -- "$service" <<<"$known" ||
    die "unknown compose service '$service' (valid: $services)"

require_daemon
# The service's image as Compose resolved it (variables substituted).
image=$(awk -v s="  $service:" '
    $0 == s {in_s = 1; next}
    in_s && /^  [^ ]/ {in_s = 0}
    in_s && /^    image:/ {print $2; exit}' <<<"$config")
[ -n "$image" ] || die "service '$service' names no image in the compose file"
if ! image_exists "$image"; then
    case "$service" in
        tf-*) hint="make image-tf" ;;
        torch-*) hint="make image-torch" ;;
        *) hint="make images" ;;
    esac
    die "image '$image' for service '$service' not found; build it first ($hint)"
fi
mkdir -p "${BENCH_RESULTS_DIR:-results}"
exec "${compose[@]}" run --rm -T "$service" "$@"
