#!/usr/bin/env bash
# perf/runtime_overhead.sh [OUT]: the measurement behind perf/runtime_overhead.md.
#
# `benchrun compare-runtimes` interleaved (A B C ... A B C ...) over REPEATS rounds, once per
# model and framework (ResNet-50 and AlexNet, each on the TensorFlow and the torch image), small
# (64 px, batch 4/8, 2 warm-up and 20 timed steps, 2 threads) so that a comparison takes minutes on
# a 2-core machine. Writes OUT/MODEL-FRAMEWORK/ (compare.md/.csv/.png, records.jsonl, logs/) and
# OUT/loadavg.txt (the load average before and after each comparison: our machines are shared).
#
#   RUNTIMES          comma-separated (default local,docker,apptainer,podman,charliecloud,podman-hpc,udocker)
#   TORCH_RUNTIMES    for the torch image (default: RUNTIMES; its 6 GB import costs minutes per runtime)
#   TF_IMAGE, TORCH_IMAGE   the images (default dlbench-tensorflow:latest, dlbench-torch:latest)
#   REPEATS           rounds (default 5)
#   MODELS            default "resnet50 alexnet"
#   FRAMEWORKS        default "tensorflow torch"
#   NUM_BATCHES       timed steps per run (default 20)
#   PYTHON            the interpreter with benchrun's packages (default: the checkout's .venv, else python3)
# Run it alone on the machine if you can; on ours, under `flock /tmp/dlbench-heavy.lock`.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$here/perf/runtime_overhead}"
runtimes="${RUNTIMES:-local,docker,apptainer,podman,charliecloud,podman-hpc,udocker}"
repeats="${REPEATS:-5}"
python="${PYTHON:-$( [ -x "$here/.venv/bin/python" ] && echo "$here/.venv/bin/python" || echo python3)}"
mkdir -p "$out"
common=(--image-size 64 --num-warmup-batches 2 --num-batches "${NUM_BATCHES:-20}" --num-threads 2)
stamp() { echo "$(date -u +%FT%TZ) $1: loadavg $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/loadavg.txt"; }
compare() {  # MODEL FRAMEWORK IMAGE BATCH RUNTIMES
    stamp "before $1-$2"
    PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$python" -m runners compare-runtimes --runtimes "$5" \
        --repeats "$repeats" --image "$3" --out "$out/$1-$2" -- \
        --framework "$2" --model "$1" --batch-size "$4" "${common[@]}" || echo "compare-runtimes ($1, $2) exited $?"
    stamp "after $1-$2"
}
batch() { case "$1" in resnet50) echo 4 ;; alexnet) echo 8 ;;
          *) echo "runtime_overhead.sh: unknown model '$1' (resnet50, alexnet)" >&2; exit 2 ;; esac; }
for model in ${MODELS:-resnet50 alexnet}; do
    size="$(batch "$model")"
    for framework in ${FRAMEWORKS:-tensorflow torch}; do
        case "$framework" in
            tensorflow) compare "$model" tensorflow "${TF_IMAGE:-dlbench-tensorflow:latest}" "$size" "$runtimes" ;;
            torch) compare "$model" torch "${TORCH_IMAGE:-dlbench-torch:latest}" "$size" "${TORCH_RUNTIMES:-$runtimes}" ;;
            *) echo "runtime_overhead.sh: unknown framework '$framework' (tensorflow, torch)" >&2; exit 2 ;;
        esac
    done
done
