#!/usr/bin/env bash
# Fill ./wheelhouse with binary wheels of every pinned dependency of both images
# (pyproject.toml: build-system, core, [tf], [torch]), and ./wheelhouse-late with
# those of their late layer (containers/late/requirements.txt), so image builds
# install offline. Uses the host's pip and its configuration (find-links, index, CA).
# The wheels live outside the clone, in $DLBENCH_CACHE/wheelhouse-KEY and
# wheelhouse-late-KEY (default ~/.cache/dlbench), KEY a hash of the pinned requirements: a fresh clone or a
# second checkout on the machine reuses them, and ./wheelhouse gets hard links
# (copies across file systems). A complete cache is not asked of pip again.
#
#   containers/wheelhouse.sh     env: PYTHON (default python3),
#                                WHEELHOUSE_PYTHON=3.12 for a base with another Python,
#                                DLBENCH_CACHE (default ~/.cache/dlbench)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$DLBENCH_ROOT"

py=${PYTHON:-python3}
command -v "$py" >/dev/null 2>&1 || die "PYTHON=$py not found"
"$py" -m pip --version >/dev/null 2>&1 || die "$py has no pip (apt-get install python3-pip)"
reqs=$(mktemp)
trap 'rm -f "$reqs"' EXIT
"$py" containers/image/pydeps.py pyproject.toml build core tf torch >"$reqs"

target=()
if [ -n "${WHEELHOUSE_PYTHON:-}" ]; then
    [[ "$WHEELHOUSE_PYTHON" =~ ^3\.[0-9]+$ ]] || die "WHEELHOUSE_PYTHON=$WHEELHOUSE_PYTHON is not a version like 3.12"
    target=(--python-version "$WHEELHOUSE_PYTHON" --platform manylinux_2_28_x86_64
            --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
            --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64
            --platform manylinux1_x86_64 --platform any)
fi
start=$(date +%s)
root=${DLBENCH_CACHE:-$HOME/.cache/dlbench}
key=$(cat "$reqs" containers/horovod/requirements.txt | { cat; echo "python=${WHEELHOUSE_PYTHON:-host} horovod==0.28.1"; } \
      | sha256sum | cut -c1-16)
late_key=$(cat containers/late/requirements.txt | { cat; echo "python=${WHEELHOUSE_PYTHON:-host}"; } | sha256sum | cut -c1-16)

# The steps: each one pip download into the cache directory given.
pinned() { "$py" -m pip download --only-binary=:all: --dest "$1" "${target[@]}" -r "$reqs"; }
# Horovod images (containers/horovod/Dockerfile): Horovod is built from its
# sdist (patched), plus its few runtime dependencies as wheels.
horovod() {
    "$py" -m pip download --only-binary=:all: --dest "$1" "${target[@]}" -r containers/horovod/requirements.txt &&
        "$py" -m pip download --no-binary=:all: --no-deps --dest "$1" horovod==0.28.1
}
# The images' late layer (containers/late/): a directory of its own, so that a new wheel
# there does not change the cache key of the dependency layers that mount wheelhouse/.
late() { "$py" -m pip download --only-binary=:all: --dest "$1" "${target[@]}" -r containers/late/requirements.txt; }

# fill CACHE DIR STEP...: the steps, once per CACHE (a complete cache is not asked of pip
# again), then hard links into DIR (no second copy of 3 GB; cp where the cache is on
# another file system).
fill() {
    local cache=$1 dir=$2 step log f
    shift 2
    mkdir -p "$cache" "$dir"
    if [ ! -f "$cache/.complete" ]; then
        log=$(mktemp /tmp/dlbench-wheelhouse.XXXXXX.log)
        for step in "$@"; do
            if ! "$step" "$cache" >"$log" 2>&1; then
                tail -n 5 "$log" >&2
                echo "dlbench-containers: error: pip download ($step) failed; full log: $log" >&2
                exit 1
            fi
        done
        rm -f "$log"
        touch "$cache/.complete"
    fi
    for f in "$cache"/*; do
        [ -f "$f" ] || continue
        ln -f "$f" "$dir/${f##*/}" 2>/dev/null || cp -f "$f" "$dir/${f##*/}"
    done
}
fill "$root/wheelhouse-$key" wheelhouse pinned horovod
fill "$root/wheelhouse-late-$late_key" wheelhouse-late late
note "wheelhouse/: $(compgen -G 'wheelhouse/*.whl' | wc -l) wheels, wheelhouse-late/: $(compgen -G 'wheelhouse-late/*.whl' | wc -l)" \
     "($(du -sch wheelhouse wheelhouse-late | tail -n1 | cut -f1), $(( $(date +%s) - start )) s; caches in $root)"
