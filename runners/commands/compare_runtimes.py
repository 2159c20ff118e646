"""`benchrun compare-runtimes`: one benchmark under several container runtimes, interleaved.

    benchrun compare-runtimes --runtimes local,docker,podman,charliecloud --repeats 3 --out DIR -- \\
        --framework tensorflow --model resnet50 --image-size 64 --batch-size 4 --num-batches 5

Rounds run every runtime once, in order (A B C A B C ...), so slow drifts of the
machine hit all runtimes alike. Per runtime: mean images/sec with a 95% t-interval
over the repeats, overhead versus `local` and a Welch t-test p-value against it.
Written to --out: compare.md (the table), compare.csv (one row per run, with the
record's run_id), compare.png (bars with 95% error bars) and records.jsonl (the
records, unchanged).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
from pathlib import Path

from benchmarks.errors import UsageError
from benchmarks.durable import append_or_fallback, check_dir
from benchmarks.stats import t_halfwidth

from .. import dispatch, runtimes
from .run import add_runtime_options, request


def add_parser(sub) -> None:
    p = sub.add_parser("compare-runtimes", help="compare container runtimes on one benchmark", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtimes", help="comma-separated (default: every available one)")
    p.add_argument("--repeats", type=int, default=3, help="rounds over all runtimes (default: 3)")
    p.add_argument("--out", required=True, help="directory for compare.{md,csv,png} and records.jsonl")
    add_runtime_options(p)
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then bench's own arguments")
    p.set_defaults(run=run)


def throughput(record: dict | None) -> float | None:
    if not record or record.get("status") != "ok" or not record.get("throughput"):
        return None
    return record["throughput"].get("images_per_sec")


def summarize(samples: dict[str, list[float]]) -> list[dict]:
    """Per runtime: n, mean, 95% half-width, overhead % vs local, Welch p-value vs local."""
    from scipy.stats import ttest_ind

    base = samples.get("local") or []
    base_mean = sum(base) / len(base) if base else None
    rows = []
    for name, values in samples.items():
        mean = sum(values) / len(values) if values else math.nan
        row = {"runtime": name, "n": len(values), "mean": mean, "ci95": t_halfwidth(values) if values else None,
               "overhead_pct": None, "p_value": None}
        if base_mean and values and name != "local":
            row["overhead_pct"] = 100.0 * (base_mean - mean) / base_mean
            if len(values) >= 2 and len(base) >= 2:
                row["p_value"] = float(ttest_ind(values, base, equal_var=False).pvalue)
        rows.append(row)
    return rows


def _fmt(value, spec: str, empty: str = "–") -> str:
    return empty if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def markdown(rows: list[dict]) -> str:
    lines = ["| runtime | runs | img/s (mean ± 95% CI) | overhead vs local | Welch p vs local |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['runtime']} | {r['n']} | {_fmt(r['mean'], '.2f')} ± {_fmt(r['ci95'], '.2f')} "
                     f"| {_fmt(r['overhead_pct'], '+.1f')}{'%' if r['overhead_pct'] is not None else ''} "
                     f"| {_fmt(r['p_value'], '.3f')} |")
    return "\n".join(lines) + "\n"


def chart(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    names = [r["runtime"] for r in rows]
    means = [0.0 if math.isnan(r["mean"]) else r["mean"] for r in rows]
    errors = [r["ci95"] or 0.0 for r in rows]
    ax.bar(names, means, yerr=errors, capsize=6, color="#4C72B0", edgecolor="black")
    for i, r in enumerate(rows):
        ax.annotate(f"{_fmt(r['mean'], '.2f')}\n(n={r['n']})", (i, means[i] + errors[i]), ha="center",
                    va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.set_ylabel("images/sec (mean, 95% CI)")
    ax.set_title(title, fontsize=9)
    ax.set_ylim(0, max([m + e for m, e in zip(means, errors)] + [1.0]) * 1.25)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run(args) -> int:
    if args.repeats < 1:
        raise UsageError(f"--repeats must be 1 or more, got {args.repeats}")
    check_dir(args.out, "--out")
    names = [n for n in (args.runtimes or "").split(",") if n] or runtimes.available()
    for name in names:
        runtimes.get(name).require()  # unknown or missing: one line, before anything runs
    requests = {name: request(args, name) for name in names}
    for req in requests.values():  # convert/load images once, up front
        dispatch.prepare(req, runtimes.get(req.runtime))  # cached: later runs reuse it
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    samples: dict[str, list[float]] = {name: [] for name in names}
    rows_csv = []
    for round_ in range(1, args.repeats + 1):
        for name in names:
            req = requests[name]
            req.run_id = dispatch.RunRequest([]).run_id  # a fresh container name per run
            outcome = dispatch.run(req)
            record = outcome.record
            if record is not None:
                append_or_fallback(out / "records.jsonl", record, f"dlbench-record-{record['run_id']}.jsonl")
            value = throughput(record)
            if value is not None:
                samples[name].append(value)
            prov = (record or {}).get("provenance", {})
            rows_csv.append({"round": round_, "runtime": name, "run_id": (record or {}).get("run_id", ""),
                             "status": (record or {}).get("status", f"no record (exit {outcome.exit_code})"),
                             "images_per_sec": "" if value is None else f"{value:.4f}",
                             "container_runtime": prov.get("container_runtime", ""), "image": prov.get("image") or ""})
            print(f"compare-runtimes: round {round_}/{args.repeats} {name}: "
                  f"{'failed' if value is None else f'{value:.2f} img/s'}", flush=True)
            if outcome.interrupted:
                break
        if outcome.interrupted:
            print("compare-runtimes: interrupted: summarizing the runs so far", flush=True)
            break
    with open(out / "compare.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows_csv[0]))
        writer.writeheader()
        writer.writerows(rows_csv)
    summary = summarize(samples)
    table = markdown(summary)
    (out / "compare.md").write_text(table)
    chart(summary, out / "compare.png", " ".join(requests[names[0]].bench_args))
    print(table, end="")
    return 130 if outcome.interrupted else (0 if all(samples.values()) else 1)
