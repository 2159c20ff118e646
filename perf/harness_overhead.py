"""Does `bench` cost throughput? `bench` vs the simplest honest hand-written training loop.

The bare loop is what a careful user writes by hand (benchmarks/run/reference.py,
its one home, which `bench --reference` times in-process too): same model,
optimizer (SGD momentum), batch, image size and threads; SYNTHETIC_BATCHES
rotating synthetic batches passed to the step (as bench does), and the loss
read back every step (so each step has finished before the next starts, which
bench ensures with its device synchronisation). Both frameworks by default; per
framework the two sides run interleaved (ABBA order, so drift and thermal
effects hit both equally), each run in a fresh process, as `bench` itself
runs. Prints images/sec of each side with a 95% t-interval and the ratio
bench / bare as the mean of the per-round ratios with its 95% t-interval, min
and max. Goal: ratio >= 0.98. Needs an idle machine: on a shared one the
spread says the ratio cannot be read.

`--progress` compares three sides instead, rotated each round: bench with a
progress line every step (`--display-every 1`, the most it can print), bench
with progress off (`--display-every 0`), and the bare loop. It prints each
harness ratio against the bare loop and the ratio progress on / off, each as
the mean of the per-round ratios with a 95% t-interval. Goal: on / off within
noise of 1 (its interval contains 1).

    .venv/bin/python perf/harness_overhead.py --rounds 4
    .venv/bin/python perf/harness_overhead.py --framework tensorflow --model resnet50 --image-size 64 --rounds 6
    .venv/bin/python perf/harness_overhead.py --framework torch --rounds 6 --progress
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure.stats import Stats, t_halfwidth  # noqa: E402 - once the checkout is on sys.path
from benchmarks.run import reference  # noqa: E402 - once the checkout is on sys.path

SYNTHETIC_BATCHES = 4  # bench's default --synthetic-batches


def run_bench(args, framework: str, display_every: int = 0) -> float:
    command = [
        sys.executable, "-m", "benchmarks", "--framework", framework, "--model", args.model,
        "--image-size", str(args.image_size), "--batch-size", str(args.batch_size),
        "--num-warmup-batches", str(args.warmup), "--num-batches", str(args.batches),
        "--num-threads", str(args.num_threads), "--json", "--display-every", str(display_every),
        "--synthetic-batches", str(SYNTHETIC_BATCHES),
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.splitlines()[-1])["throughput"]["images_per_sec"]


def run_bare(args, framework: str) -> float:
    command = [sys.executable, __file__, "--bare", "--framework", framework, "--model", args.model,
               "--image-size", str(args.image_size), "--batch-size", str(args.batch_size),
               "--warmup", str(args.warmup), "--batches", str(args.batches), "--num-threads", str(args.num_threads)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def config_line(args, framework: str) -> str:
    return (f"config: {framework} {args.model} {args.image_size}px batch {args.batch_size}, {args.warmup} warmup + "
            f"{args.batches} timed batches, {args.num_threads} threads, {SYNTHETIC_BATCHES} rotating batches")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--framework", choices=["torch", "tensorflow", "both"], default="both")
    p.add_argument("--model", default="resnet50")
    p.add_argument("--image-size", type=int, default=112)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--num-threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=4, help="bench/bare pairs per framework, alternating order")
    p.add_argument("--progress", action="store_true", help="bench with progress on vs off vs bare (see above)")
    p.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    frameworks = ["torch", "tensorflow"] if args.framework == "both" else [args.framework]
    if args.bare:
        print(reference.images_per_sec(args.framework, args.model, args.batch_size, args.image_size, args.warmup,
                                       args.batches, args.num_threads, SYNTHETIC_BATCHES))
        return
    if args.progress:
        for framework in frameworks:
            progress_on_vs_off(args, framework)
        return
    results = {(fw, side): [] for fw in frameworks for side in ("bench", "bare")}
    for round_ in range(args.rounds):
        for framework in frameworks:  # frameworks interleaved too: both see the same machine state
            order = ("bench", "bare") if round_ % 2 == 0 else ("bare", "bench")
            for side in order:
                rate = run_bench(args, framework) if side == "bench" else run_bare(args, framework)
                results[(framework, side)].append(rate)
                print(f"round {round_ + 1}/{args.rounds} {framework:>10} {side:>5}: {rate:8.3f} images/sec", flush=True)
    for framework in frameworks:
        print(config_line(args, framework))
        for side in ("bench", "bare"):
            rates = results[(framework, side)]
            half = t_halfwidth(rates)
            spread = f" ± {half:.3f}" if half is not None else ""
            print(f"  {side:>5}: {Stats.of(rates).mean:.3f}{spread} images/sec (95% t, n={len(rates)})")
        ratios = [a / b for a, b in zip(results[(framework, "bench")], results[(framework, "bare")])]
        print("  " + ratio_line("ratio bench/bare", ratios) + "  (goal >= 0.98)")


def ratio_line(name: str, ratios: list[float]) -> str:
    half = t_halfwidth(ratios)
    spread = f" ± {half:.3f}" if half is not None else ""
    return (f"{name}: {Stats.of(ratios).mean:.3f}{spread} (95% t over {len(ratios)} rounds; "
            f"min {min(ratios):.3f}, max {max(ratios):.3f})")


def progress_on_vs_off(args, framework: str) -> None:
    """Three sides, order rotated each round so none always runs first; per-round ratios."""
    sides = {"progress-on": lambda: run_bench(args, framework, display_every=1),
             "progress-off": lambda: run_bench(args, framework, display_every=0),
             "bare": lambda: run_bare(args, framework)}
    names = list(sides)
    results = {name: [] for name in names}
    for round_ in range(args.rounds):
        order = names[round_ % 3:] + names[:round_ % 3]
        for side in order:
            rate = sides[side]()
            results[side].append(rate)
            print(f"round {round_ + 1}/{args.rounds} {side:>12}: {rate:8.3f} images/sec", flush=True)
    for side, rates in results.items():
        print(f"{side:>12}: {Stats.of(rates).mean:.3f} ± {t_halfwidth(rates) or 0:.3f} images/sec (95% t, n={args.rounds})")
    print(config_line(args, framework))
    on, off, bare = results["progress-on"], results["progress-off"], results["bare"]
    print(ratio_line("ratio bench(progress on)/bare ", [a / b for a, b in zip(on, bare)]))
    print(ratio_line("ratio bench(progress off)/bare", [a / b for a, b in zip(off, bare)]))
    print(ratio_line("ratio progress on/off         ", [a / b for a, b in zip(on, off)]) + "  (goal: interval contains 1)")


if __name__ == "__main__":
    main()
