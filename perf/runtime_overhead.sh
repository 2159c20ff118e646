#!/usr/bin/env bash
# perf/runtime_overhead.sh [OUT]: the measurement behind perf/runtime_overhead.md.
#
# `benchrun compare-runtimes` interleaved (A B C ... A B C ...) over REPEATS rounds, once per model:
# ResNet-50 on the TensorFlow image and AlexNet on the torch image (Keras has no AlexNet), small
# (64 px, batch 4/8, 2 warm-up and 20 timed steps, 2 threads) so that a comparison takes minutes on
# a 2-core machine. Writes OUT/MODEL/ (compare.md/.csv/.png, records.jsonl, logs/) and
# OUT/loadavg.txt (the load average before and after each comparison: our machines are shared).
#
#   RUNTIMES          comma-separated (default local,docker,apptainer,podman,charliecloud,podman-hpc,udocker)
#   ALEXNET_RUNTIMES  for AlexNet (default: RUNTIMES)
#   TF_IMAGE, TORCH_IMAGE   the images (default dlbench-tensorflow:latest, dlbench-torch:latest)
#   REPEATS           rounds (default 5)
#   MODELS            which comparisons (default "resnet50 alexnet")
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
    stamp "before $1"
    PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$python" -m runners compare-runtimes --runtimes "$5" \
        --repeats "$repeats" --image "$3" --out "$out/$1" -- \
        --framework "$2" --model "$1" --batch-size "$4" "${common[@]}" || echo "compare-runtimes ($1) exited $?"
    stamp "after $1"
}
for model in ${MODELS:-resnet50 alexnet}; do
    case "$model" in
        resnet50) compare resnet50 tensorflow "${TF_IMAGE:-dlbench-tensorflow:latest}" 4 "$runtimes" ;;
        alexnet) compare alexnet torch "${TORCH_IMAGE:-dlbench-torch:latest}" 8 "${ALEXNET_RUNTIMES:-$runtimes}" ;;
        *) echo "runtime_overhead.sh: unknown model '$model' (resnet50, alexnet)" >&2; exit 2 ;;
    esac
done
