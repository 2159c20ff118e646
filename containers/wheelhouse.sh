#!/usr/bin/env bash
# Fill ./wheelhouse with binary wheels of every pinned dependency of both images
# (pyproject.toml: build-system, core, [tf], [torch]) so image builds install
# offline. Uses the host's pip and its configuration (find-links, index, CA).
# The wheels live outside the clone, in $DLBENCH_CACHE/wheelhouse-KEY (default
# ~/.cache/dlbench), KEY a hash of the pinned requirements: a fresh clone or a
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
key=$(cat "$reqs" containers/horovod/requirements.txt | { cat; echo "python=${WHEELHOUSE_PYTHON:-host} horovod==0.28.1"; } \
      | sha256sum | cut -c1-16)
cache=${DLBENCH_CACHE:-$HOME/.cache/dlbench}/wheelhouse-$key
mkdir -p "$cache" wheelhouse
link_into_clone() {  # hard links: no second copy of 3 GB; cp where the cache is on another file system
    local f
    for f in "$cache"/*; do
        [ -f "$f" ] || continue
        ln -f "$f" "wheelhouse/${f##*/}" 2>/dev/null || cp -f "$f" "wheelhouse/${f##*/}"
    done
}
if [ -f "$cache/.complete" ]; then
    link_into_clone
    note "wheelhouse/: $(compgen -G 'wheelhouse/*.whl' | wc -l) wheels from the cache $cache"
    exit 0
fi
log=$(mktemp /tmp/dlbench-wheelhouse.XXXXXX.log)
if ! "$py" -m pip download --only-binary=:all: --dest "$cache" "${target[@]}" -r "$reqs" >"$log" 2>&1; then
    tail -n 5 "$log" >&2
    echo "dlbench-containers: error: pip download failed; full log: $log" >&2
    exit 1
fi
# Horovod images (containers/horovod/Dockerfile): Horovod is built from its
# sdist (patched), plus its few runtime dependencies as wheels.
if ! { "$py" -m pip download --only-binary=:all: --dest "$cache" "${target[@]}" \
         -r containers/horovod/requirements.txt &&
       "$py" -m pip download --no-binary=:all: --no-deps --dest "$cache" horovod==0.28.1; } >"$log" 2>&1; then
    tail -n 5 "$log" >&2
    echo "dlbench-containers: error: pip download (Horovod) failed; full log: $log" >&2
    exit 1
fi
rm -f "$log"
touch "$cache/.complete"
link_into_clone
note "wheelhouse/: $(compgen -G 'wheelhouse/*.whl' | wc -l) wheels, $(du -sh wheelhouse | cut -f1) in $(( $(date +%s) - start )) s"
