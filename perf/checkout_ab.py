"""Does a change cost throughput? One `benchrun run` command, from two checkouts, side by side.

Runs the same `benchrun run ARGS` from this checkout (B, the change) and from another (A, e.g. a git worktree of
the commit before it), alternately in ABBA order (so drift and a neighbour's load hit both sides alike), each run a
fresh set of processes. Prints each side's images/sec (total over ranks, from the record) with a 95% t-interval
and the ratio B/A as the mean of the per-round ratios with its 95% t-interval, min and max. A ratio whose interval
lies within 1 +- margin is equivalence within that margin; one that straddles a bound is inconclusive, and the
script says how many rounds would make the interval narrow enough (from the spread seen). Needs an idle machine.

    git worktree add /tmp/before HEAD~1
    .venv/bin/python perf/checkout_ab.py --before /tmp/before --rounds 6 -- --launcher local -n 2 --num-ps 1 -- \\
        --framework tensorflow --strategy ps --model alexnet --image-size 64 --batch-size 16 --num-batches 40
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure.stats import Stats, t_halfwidth  # noqa: E402 - once the checkout is on sys.path


def run(checkout: Path, args: list[str]) -> float:
    """One `benchrun run` from `checkout`: the record's total images/sec."""
    done = subprocess.run([sys.executable, "-m", "runners", "run", *args], cwd=checkout, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(checkout)}, timeout=1800)
    records = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not records:
        sys.exit(f"checkout_ab: {checkout}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return json.loads(records[-1])["throughput"]["images_per_sec"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout (A)")
    parser.add_argument("--rounds", type=int, default=6, help="AB pairs (default 6)")
    parser.add_argument("--margin", type=float, default=0.02, help="equivalence margin on the ratio (default 0.02)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then benchrun run's arguments")
    opts = parser.parse_args()
    args = opts.args[1:] if opts.args[:1] == ["--"] else opts.args
    sides = {"A": opts.before.resolve(), "B": ROOT}
    rates: dict[str, list[float]] = {"A": [], "B": []}
    for index in range(opts.rounds):
        for side in ("AB" if index % 2 == 0 else "BA"):
            rates[side].append(run(sides[side], args))
            print(f"round {index + 1} {side}: {rates[side][-1]:.3f} images/sec", flush=True)
    for side in "AB":
        half = t_halfwidth(rates[side])
        print(f"{side} ({sides[side]}): {Stats.of(rates[side]).mean:.3f} +- {half:.3f} images/sec (95% t)")
    ratios = [b / a for a, b in zip(rates["A"], rates["B"])]
    mean, half = Stats.of(ratios).mean, t_halfwidth(ratios)
    low, high = mean - half, mean + half
    print(f"B/A: {mean:.4f} [{low:.4f}, {high:.4f}] (95% t over {len(ratios)} rounds; min {min(ratios):.4f}, "
          f"max {max(ratios):.4f})")
    if 1 - opts.margin <= low and high <= 1 + opts.margin:
        print(f"equivalent within +-{opts.margin:.0%}")
    else:
        needed = math.ceil(len(ratios) * (half / opts.margin) ** 2) if half else len(ratios)
        print(f"not shown equivalent within +-{opts.margin:.0%}: the interval reaches past it; about {needed} rounds "
              f"at this spread would narrow it to the margin" + ("" if low <= 1 <= high else " (1 is outside it)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
