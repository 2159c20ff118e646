# Shared helpers for the containers/ scripts (sourced, not run).
# One convention everywhere: bad input or a missing prerequisite is one line on
# stderr naming the problem and what would be valid, exit status 2, instead of a
# wall of Docker output.

die() {
    echo "dlbench-containers: error: $*" >&2
    exit 2
}

note() {
    echo "dlbench-containers: $*" >&2
}

# The repository root, whatever directory we were started from.
DLBENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Any docker client can talk to the daemon; `docker info` is cheap.
docker_cli() {
    command -v docker >/dev/null 2>&1 || die "no docker client on PATH (install docker.io, or run containers/dockerd.sh --install)"
    echo docker
}

require_daemon() {
    local cli out
    cli=$(docker_cli)
    if ! out=$("$cli" info --format '{{.ServerVersion}}' 2>&1); then
        die "Docker daemon not reachable at ${DOCKER_HOST:-unix:///var/run/docker.sock} ($(grep -m1 -iE 'cannot connect|error|denied' <<<"$out" | sed 's/^ *//' | cut -c1-160)); start it with containers/dockerd.sh"
    fi
}

# BuildKit is needed for RUN --mount (secrets, wheelhouse). Debian's 20.10
# client has it built in; a newer client needs the buildx plugin. Prints the
# argv prefix for a BuildKit build that lands in the local image store.
buildkit_build_cmd() {
    local c
    if docker buildx version >/dev/null 2>&1; then
        echo "docker buildx build --load"
        return
    fi
    for c in /usr/bin/docker $(command -v -a docker 2>/dev/null); do
        [ -x "$c" ] || continue
        # Clients before 23.0 run BuildKit in-process with DOCKER_BUILDKIT=1.
        local major
        major=$("$c" version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1)
        if [ -n "$major" ] && [ "$major" -lt 23 ]; then
            echo "env DOCKER_BUILDKIT=1 $c build"
            return
        fi
    done
    die "no BuildKit-capable docker client: install the buildx plugin or Debian's docker.io (/usr/bin/docker)"
}

image_exists() {
    docker image inspect "$1" >/dev/null 2>&1
}

# Rebuilds leave earlier images dangling (a few GB each); only ours are removed: the images
# (io.dlbench.* labels) and the dependency stage Horovod builds from (the dlbench base's labels).
# One in use by a container stays.
prune_stale_images() {
    local dangling id labels
    dangling=$(docker images -q --no-trunc --filter dangling=true)
    [ -n "$dangling" ] || return 0
    # shellcheck disable=SC2086  # one argument per id
    while read -r id labels; do
        case $labels in
            *'"io.dlbench.'*|*'dlbench local base'*) docker rmi "$id" >/dev/null 2>&1 || true ;;
        esac
    done < <(docker image inspect -f '{{.Id}} {{json .Config.Labels}}' $dangling)
}
