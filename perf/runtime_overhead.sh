#!/usr/bin/env bash
# perf/runtime_overhead.sh [OUT]: the measurement behind perf/runtime_overhead.md.
#
# `benchrun compare-runtimes` over ROUNDS rounds (each runtime once per round, in a fresh seeded random
# order), once per model and framework (default: ResNet-50 on the TensorFlow and the torch image), small
# (64 px, batch 4/8, 2 warm-up and 20 timed steps, 2 threads) so that a round takes a minute or two on a
# 2-core machine. Writes OUT/MODEL-FRAMEWORK/ (compare.md with the verdicts, compare.csv, verdicts.csv,
# compare.png, records.jsonl, runs.jsonl, logs/) and OUT/loadavg.txt (the load average before and after
# each comparison: our machines are shared), and ends with every comparison's verdict table.
# Run it again with the same OUT to add rounds to every comparison (follow "about N more rounds").
#
#   RUNTIMES          comma-separated (default local,docker,podman,apptainer,charliecloud,podman-hpc,udocker,containerd)
#   TORCH_RUNTIMES    for the torch image (default: RUNTIMES; its 6 GB import costs minutes per runtime)
#   TF_IMAGE, TORCH_IMAGE   the images (default dlbench-tensorflow:latest, dlbench-torch:latest)
#   ROUNDS            rounds to add (default 10; REPEATS is read as before when ROUNDS is unset)
#   MARGIN            equivalence margin in percent (default: compare-runtimes' own)
#   SEED              seed of the rounds' orders (default: a new one per comparison, kept in its comparison.json)
#   MODELS            default "resnet50" (also: alexnet)
#   FRAMEWORKS        default "tensorflow torch"
#   NUM_BATCHES       timed steps per run (default 20)
#   PYTHON            the interpreter with benchrun's packages (default: the checkout's .venv, else python3)
#   PRINT_VERDICTS    0: leave the verdict tables out of the output (overhead.sbatch prints them itself)
# Run it alone on the machine if you can; on ours, under `flock /tmp/dlbench-heavy.lock`.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$here/perf/runtime_overhead}"
runtimes="${RUNTIMES:-local,docker,podman,apptainer,charliecloud,podman-hpc,udocker,containerd}"
rounds="${ROUNDS:-${REPEATS:-10}}"
options=(${MARGIN:+--margin "$MARGIN"} ${SEED:+--seed "$SEED"})
python="${PYTHON:-$( [ -x "$here/.venv/bin/python" ] && echo "$here/.venv/bin/python" || echo python3)}"
mkdir -p "$out"
common=(--image-size 64 --num-warmup-batches 2 --num-batches "${NUM_BATCHES:-20}" --num-threads 2)
stamp() { echo "$(date -u +%FT%TZ) $1: loadavg $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/loadavg.txt"; }
compare() {  # MODEL FRAMEWORK IMAGE BATCH RUNTIMES
    stamp "before $1-$2"
    PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$python" -m runners compare-runtimes --runtimes "$5" \
        --rounds "$rounds" "${options[@]}" --image "$3" --out "$out/$1-$2" -- \
        --framework "$2" --model "$1" --batch-size "$4" "${common[@]}" || echo "compare-runtimes ($1, $2) exited $?"
    stamp "after $1-$2"
}
batch() { case "$1" in resnet50) echo 4 ;; alexnet) echo 8 ;;
          *) echo "runtime_overhead.sh: unknown model '$1' (resnet50, alexnet)" >&2; exit 2 ;; esac; }
for model in ${MODELS:-resnet50}; do
    size="$(batch "$model")"
    for framework in ${FRAMEWORKS:-tensorflow torch}; do
        case "$framework" in
            tensorflow) compare "$model" tensorflow "${TF_IMAGE:-dlbench-tensorflow:latest}" "$size" "$runtimes" ;;
            torch) compare "$model" torch "${TORCH_IMAGE:-dlbench-torch:latest}" "$size" "${TORCH_RUNTIMES:-$runtimes}" ;;
            *) echo "runtime_overhead.sh: unknown framework '$framework' (tensorflow, torch)" >&2; exit 2 ;;
        esac
    done
done
[ "${PRINT_VERDICTS:-1}" = 0 ] && exit 0
for table in "$out"/*/compare.md; do  # the verdicts, last: what a job's log ends with
    echo; echo "== ${table%/compare.md}"; cat "$table"
done
