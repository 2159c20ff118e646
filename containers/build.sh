#!/usr/bin/env bash
# Build one dlbench image with BuildKit, after checking the inputs that would
# otherwise fail deep inside Docker with pages of output.
#
#   containers/build.sh {tf|torch|horovod-openmpi|horovod-mpich} [docker build args...]
#
# The Horovod images (containers/horovod/Dockerfile) are built FROM the torch
# image of the same version (FRAMEWORK_IMAGE, default dlbench-torch:VERSION),
# which must exist: `make image-horovod-*` builds it first.
#
# Env (all optional; `make image-tf` sets them):
#   BASE_IMAGE  base image (default python:3.11-slim-bookworm; offline:
#               dlbench-base:bookworm from `make base-image`)
#   IMAGE       name:tag (default dlbench-tensorflow:VERSION / dlbench-torch:VERSION)
#   CA_CERT     extra CA bundle for pip over a proxy, passed as build secret `ca`
#   TF_REQUIREMENT  GPU TensorFlow instead of tensorflow-cpu (Dockerfile.tf)
#   BUILD_LOG   where the full build output goes (default /tmp/dlbench-build-FW.log)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

fw=${1:-}
case "$fw" in
    tf) name=dlbench-tensorflow dockerfile=Dockerfile.tf ;;
    torch) name=dlbench-torch dockerfile=Dockerfile.torch ;;
    horovod-openmpi|horovod-mpich) name=dlbench-$fw dockerfile=containers/horovod/Dockerfile ;;
    "") die "missing framework argument (valid: tf, torch, horovod-openmpi, horovod-mpich)" ;;
    *) die "unknown framework '$fw' (valid: tf, torch, horovod-openmpi, horovod-mpich)" ;;
esac
shift

cd "$DLBENCH_ROOT"
version=$(sed -n 's/^__version__ *= *"\(.*\)"/\1/p' benchmarks/__init__.py)
[ -n "$version" ] || die "cannot read __version__ from benchmarks/__init__.py"
image=${IMAGE:-$name:$version}
tags=(-t "$image")
# :latest (what Compose runs by default) only follows the default versioned name.
[ -z "${IMAGE:-}" ] && tags+=(-t "$name:latest")
base=${BASE_IMAGE:-python:3.11-slim-bookworm}
log=${BUILD_LOG:-/tmp/dlbench-build-$fw.log}

require_daemon
build=$(buildkit_build_cmd)

# A build that fills the disk breaks every later step on the machine.
min_gb=${MIN_FREE_GB:-8}
root_dir=$(docker info -f '{{.DockerRootDir}}' 2>/dev/null || echo /var/lib/docker)
free_gb=$(df -Pk "$root_dir" 2>/dev/null | awk 'NR==2 {print int($4/1048576)}')
if [ -n "$free_gb" ] && [ "$free_gb" -lt "$min_gb" ]; then
    die "only $free_gb GB free under $root_dir, need $min_gb (MIN_FREE_GB); free space: docker image prune, docker builder prune"
fi

# Horovod images start from the torch image (checked below), not from the base.
if [[ "$fw" != horovod-* ]] && ! image_exists "$base"; then
    # A registry may be reachable elsewhere; here a pull fails, and says why.
    if ! out=$(docker pull -q "$base" 2>&1); then
        die "base image '$base' is not available locally and cannot be pulled ($(printf '%s' "$out" | tail -n1 | sed 's/^Error response from daemon: //' | cut -c1-160)); without a registry use BASE_IMAGE=dlbench-base:bookworm (make base-image)"
    fi
fi

secret=()
if [ -n "${CA_CERT:-}" ]; then
    [ -r "$CA_CERT" ] && [ -s "$CA_CERT" ] || die "CA_CERT=$CA_CERT is not a readable, non-empty file"
    secret=(--secret "id=ca,src=$CA_CERT")
fi
mkdir -p wheelhouse wheelhouse-late   # the Dockerfiles bind-mount them; wheels in them mean offline
wheels=$(compgen -G 'wheelhouse/*.whl' | wc -l || true)

extra=()
[ "$fw" = tf ] && [ -n "${TF_REQUIREMENT:-}" ] && extra+=(--build-arg "TF_REQUIREMENT=$TF_REQUIREMENT")
if [[ "$fw" == horovod-* ]]; then
    torch_image=dlbench-torch:$version
    image_exists "$torch_image" || die "framework image '$torch_image' not found; build it first (make image-torch)"
    # Start from the torch image's dependency stage, not the finished image: a change to
    # dlbench's own source must not recompile Horovod (minutes), only its last layers.
    framework_image=${FRAMEWORK_IMAGE:-dlbench-torch-framework:$version}
    if [ -z "${FRAMEWORK_IMAGE:-}" ]; then
        torch_base=$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.base.name"}}' "$torch_image")
        earlier=$(docker image inspect -f '{{.Id}}' "$framework_image" 2>/dev/null || true)
        # shellcheck disable=SC2086
        $build -q -f Dockerfile.torch --target framework --build-arg "BASE_IMAGE=$torch_base" \
            "${secret[@]}" -t "$framework_image" . >"$log.framework" 2>&1 \
            || { tail -n 15 "$log.framework" >&2; die "building $framework_image (torch dependency stage) failed"; }
        # It carries the base's labels only, so the prune below misses it: its earlier id (~6 GB), once untagged.
        [ -n "$earlier" ] && [ "$(docker image inspect -f '{{len .RepoTags}}' "$earlier" 2>/dev/null)" = 0 ] \
            && { docker rmi "$earlier" >/dev/null 2>&1 || true; }
    fi
    compgen -G 'wheelhouse/horovod-*.tar.gz' >/dev/null || [ "$wheels" -eq 0 ] \
        || die "wheelhouse/ has wheels but no Horovod sdist; run make wheelhouse"
    extra+=(--build-arg "MPI=${fw#horovod-}" --build-arg "FRAMEWORK_IMAGE=$framework_image")
    base=$framework_image
    # The build stage (compilers, Horovod's build tree) is a separate image
    # that BuildKit caches; it is not part of the result.
fi
vcs_ref=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
vcs_url=$(git remote get-url origin 2>/dev/null || echo unknown)

note "building $image from $base ($([ "$wheels" -gt 0 ] && echo "offline, $wheels wheels" || echo "pip from PyPI")); log: $log"
start=$(date +%s)
set +e
# shellcheck disable=SC2086  # $build is an argv prefix by design
$build --progress=plain -f "$dockerfile" \
    --build-arg "BASE_IMAGE=$base" \
    --build-arg "IMAGE_NAME=$image" \
    --build-arg "DLBENCH_VERSION=$version" \
    --build-arg "VCS_REF=$vcs_ref" \
    --build-arg "VCS_URL=$vcs_url" \
    "${secret[@]}" "${extra[@]}" \
    "${tags[@]}" "$@" . >"$log" 2>&1
rc=$?
set -e
secs=$(( $(date +%s) - start ))
if [ "$rc" -ne 0 ]; then
    tail -n 15 "$log" >&2
    echo "dlbench-containers: error: building $image failed after $secs s (exit $rc); full log: $log" >&2
    exit 1
fi
prune_stale_images
size=$(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.2f GB", $1/1e9}')
note "built $image in $secs s ($size)"
