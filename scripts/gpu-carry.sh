#!/usr/bin/env bash
# gpu-carry.sh [DIR]: the wheels the lent GPU machine lacks, for `bench` (pydantic) and for pytest's
# collection of tests/ (jsonschema), into DIR (default .whl, ignored by git), to name in the device
# call's `carry` (perf/gpu.md has the calls). That machine runs CPython 3.12 on x86-64 with no network:
# cp312 manylinux wheels only, pinned to the versions installed and imported together on a CPython
# 3.12 (shared/gpu-notes.md), --no-deps (attrs, numpy and the rest are there already).
#
#     scripts/gpu-carry.sh            # then on the device, before anything else:
#     python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
#
# pip reaches our PyPI proxy and the local mirrors as configured on this machine (/etc/pip.conf); the
# local mirror holds cp311 wheels only, so the cp312 ones come through the proxy. DIR is replaced
# whole only when every wheel came: never half a set, never two versions of one package.
# Exit codes: 0 ok, 1 a download failed (DIR unchanged), 2 usage.
set -euo pipefail

PINS=(
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
    jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)
MAX_BYTES=$((16 * 1024 * 1024))  # the tree and its carry travel in 64 MiB per call
me="$(basename "$0")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

case "${1:-}" in
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "$me: unknown option $1 (usage: $me [DIR])" >&2; exit 2 ;;
esac
dest="${1:-$root/.whl}"
python="${PYTHON:-python3}"
if ! "$python" -m pip --version >/dev/null 2>&1; then
    echo "$me: $python has no pip (set PYTHON to a Python with pip)" >&2
    exit 2
fi

staging="$(mktemp -d "${TMPDIR:-/tmp}/gpu-carry.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
platform_args=()
for platform in "${PLATFORMS[@]}"; do platform_args+=(--platform "$platform"); done
if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platform_args[@]}" -d "$staging" "${PINS[@]}" >"$staging/pip.log" 2>&1; then
    echo "$me: pip could not download the pinned wheels ($(grep -m1 -i error "$staging/pip.log" || tail -1 "$staging/pip.log")); $dest unchanged" >&2
    exit 1
fi
count="$(find "$staging" -name '*.whl' | wc -l)"
if [ "$count" -ne "${#PINS[@]}" ]; then
    echo "$me: expected ${#PINS[@]} wheels, pip saved $count; $dest unchanged" >&2
    exit 1
fi
bytes="$(cat "$staging"/*.whl | wc -c)"
if [ "$bytes" -gt "$MAX_BYTES" ]; then
    echo "$me: the wheels take $bytes bytes, over the $MAX_BYTES kept for them; $dest unchanged" >&2
    exit 1
fi
rm -rf "$dest.new"
mkdir -p "$dest.new"
mv "$staging"/*.whl "$dest.new/"
rm -rf "$dest"
mv "$dest.new" "$dest"
echo "$me: ${#PINS[@]} wheels ($((bytes / 1024)) KiB) in $dest: name it in the device call's carry (perf/gpu.md)"
