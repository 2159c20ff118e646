#!/usr/bin/env bash
# perf/runtime_overhead.sh [OUT]: the measurement behind perf/runtime_overhead.md.
#
# `benchrun compare-runtimes` over every runtime that runs on our machines, interleaved
# (A B C ... A B C ...), 5 rounds, ResNet-50 then AlexNet on the torch image, small enough
# (64 px, batch 4/8, 20 timed steps) that both take ~15-25 min on a 2-core machine.
# Writes OUT/resnet50/ and OUT/alexnet/ (compare.md/.csv/.png, records.jsonl, logs/) and
# OUT/loadavg.txt (the load average before and after each comparison: these machines are shared).
#
#   RUNTIMES  comma-separated (default local,docker,podman,charliecloud,podman-hpc,udocker)
#   IMAGE     the container image (default dlbench-torch:latest); `local` runs the host venv
#   REPEATS   rounds (default 5)
# Run it alone on the machine if you can: under `flock /tmp/dlbench-heavy.lock` on ours.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$here/perf/runtime_overhead}"
runtimes="${RUNTIMES:-local,docker,podman,charliecloud,podman-hpc,udocker}"
image="${IMAGE:-dlbench-torch:latest}"
repeats="${REPEATS:-5}"
python="${PYTHON:-python3}"
mkdir -p "$out"
common=(--framework torch --image-size 64 --num-warmup-batches 2 --num-batches 20 --num-threads 2)
stamp() { echo "$(date -u +%FT%TZ) $1: loadavg $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/loadavg.txt"; }
for spec in resnet50:4 alexnet:8; do
    model="${spec%:*}" batch="${spec#*:}"
    stamp "before $model"
    PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$python" -m runners compare-runtimes --runtimes "$runtimes" \
        --repeats "$repeats" --image "$image" --out "$out/$model" -- \
        "${common[@]}" --model "$model" --batch-size "$batch" || echo "compare-runtimes ($model) exited $?"
    stamp "after $model"
done
