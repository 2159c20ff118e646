"""Weak scaling on this machine: 1 vs N training ranks per strategy, E(N) = X(N) / (N * X(1)).

Each rank gets the same batch and threads at every scale (weak scaling, as
in the seeds). Every run goes through `benchrun launch --launcher local`, so
totals are bench's own (all images / slowest rank's wall time).

    .venv/bin/python perf/scaling.py [--ranks 2] [--model resnet50 --image-size 64 ...]

Horovod runs inside its images (containers/horovod); pass --strategies to pick.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "torch-none": ("torch", "none", 0),
    "torch-ddp": ("torch", "ddp", 0),
    "tf-allreduce": ("tensorflow", "allreduce", 0),
    "tf-ps1": ("tensorflow", "ps", 1),
}


def run(framework: str, strategy: str, num_ps: int, ranks: int, args) -> dict:
    command = [sys.executable, "-m", "runners", "launch", "--launcher", "local", "-n", str(ranks)]
    if num_ps:
        command += ["--num-ps", str(num_ps)]
    command += [
        "--", "--framework", framework, "--strategy", strategy, "--model", args.model,
        "--image-size", str(args.image_size), "--batch-size", str(args.batch_size),
        "--num-warmup-batches", str(args.warmup), "--num-batches", str(args.batches),
        "--repeats", str(args.repeats), "--num-threads", str(args.num_threads), "--json",
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads([line for line in result.stdout.splitlines() if line.startswith("{")][-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strategies", default=",".join(CASES), help=f"comma list of {', '.join(CASES)}")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--num-threads", type=int, default=1, help="per rank, at every scale")
    args = p.parse_args()
    print(f"| strategy | X(1) img/s | X({args.ranks}) img/s | E({args.ranks}) | per-rank img/s at {args.ranks} | in sync |")
    print("|---|---|---|---|---|---|")
    for name in args.strategies.split(","):
        framework, strategy, num_ps = CASES[name]
        one = run(framework, strategy, num_ps, 1, args)
        many = run(framework, strategy, num_ps, args.ranks, args)
        x1, xn = one["throughput"], many["throughput"]
        efficiency = xn["images_per_sec"] / (args.ranks * x1["images_per_sec"])
        per_rank = ", ".join(f"{r['images_per_sec']:.2f}" for r in many["ranks"])
        print(
            f"| {name} | {x1['images_per_sec']:.2f} ± {x1['ci95_halfwidth'] or 0:.2f} "
            f"| {xn['images_per_sec']:.2f} ± {xn['ci95_halfwidth'] or 0:.2f} | {efficiency:.2f} "
            f"| {per_rank} | {'yes' if many['replicas']['in_sync'] else 'no'} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
