"""`benchrun compare`: regression gate between two result stores (the user's text is DESCRIPTION;
configurations are matched on runners.reporting.keys.KEY_FIELDS, which it names)."""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass

from benchmarks.core.errors import UsageError, choices

from ..reporting import aggregate, keys, load
from .report import add_selection, selection

DESCRIPTION = f"""\
Regression gate between two result stores: exit 1 when NEW is worse than BASE.

    benchrun compare BASE.jsonl NEW.jsonl [--threshold 5%] [--metrics images_per_sec,...]
    benchrun compare nightly/last-week.jsonl nightly/today.jsonl --where runtime=apptainer

Records are matched on the fields that define a configuration:
{textwrap.fill(", ".join(keys.KEY_FIELDS), 76, initial_indent="    ", subsequent_indent="    ")}
Per metric a configuration regresses only when the change is beyond the threshold AND the
two 95% intervals do not overlap (docs/reports.md has the exact rule). Exit 0:
no regression; 1: at least one; 2: bad input.
"""

# metric -> (higher is better, unit scale, unit)
METRICS = {
    "images_per_sec": (True, 1.0, "img/s"),
    "host_rss_peak_bytes": (False, 1024 * 1024, "MiB"),
    "allocator_peak_bytes": (False, 1024 * 1024, "MiB"),
}


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="regression gate: compare NEW against BASE, exit 1 on a regression",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base", help="baseline store (bench JSONL, sweep store, or a directory of them)")
    p.add_argument("new", help="store to check (the same kinds)")
    p.add_argument("--threshold", default="5%", help="allowed change, e.g. 5%% or 0.5%% (default: 5%%)")
    p.add_argument("--metrics", default=",".join(METRICS), help=f"comma-separated, from {choices(METRICS)} (default: all)")
    add_selection(p)
    p.set_defaults(run=run)


def parse_threshold(text: str) -> float:
    """'5%' or '5' -> 0.05; must be in [0, 100)."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise UsageError(f"--threshold expects a percentage like 5%, got {text!r}") from None
    if not 0 <= value < 100:
        raise UsageError(f"--threshold must be between 0% and 100%, got {text!r}")
    return value / 100


@dataclass
class Verdict:
    metric: str
    base: aggregate.Summary | None
    new: aggregate.Summary | None
    change: float | None  # (new - base) / base
    verdict: str  # ok, regression, improvement, n/a, failed in new


def judge(metric: str, base: aggregate.Summary | None, new: aggregate.Summary | None, threshold: float) -> Verdict:
    if base is None or new is None:
        return Verdict(metric, base, new, None, "n/a")
    higher_better = METRICS[metric][0]
    b_ci, n_ci = base.ci or 0.0, new.ci or 0.0
    change = (new.mean - base.mean) / base.mean if base.mean else None
    below = new.mean + n_ci < base.mean * (1 - threshold) and new.mean + n_ci < base.mean - b_ci
    above = new.mean - n_ci > base.mean * (1 + threshold) and new.mean - n_ci > base.mean + b_ci
    worse, better = (below, above) if higher_better else (above, below)
    return Verdict(metric, base, new, change, "regression" if worse else "improvement" if better else "ok")


def summarize(metric: str, records: list[dict]) -> aggregate.Summary | None:
    return aggregate.throughput(records) if metric == "images_per_sec" else aggregate.metric(records, "memory", metric)


def compare(base: list[dict], new: list[dict], threshold: float, metrics: list[str]):
    """(rows, only_base, only_new): rows are (key, [Verdict])."""
    base_groups, new_groups = aggregate.group(base), aggregate.group(new)
    rows = []
    for key in sorted(set(base_groups) & set(new_groups), key=lambda k: tuple(map(str, k))):
        b, n = base_groups[key], new_groups[key]
        if aggregate.ok(b) and not aggregate.ok(n):
            statuses = ",".join(sorted({r["status"] for r in n}))
            rows.append((key, [Verdict("images_per_sec", aggregate.throughput(b), None, None, f"failed in new ({statuses})")]))
            continue
        rows.append((key, [judge(m, summarize(m, b), summarize(m, n), threshold) for m in metrics]))
    only_base = [(k, base_groups[k]) for k in base_groups if k not in new_groups]
    only_new = [(k, new_groups[k]) for k in new_groups if k not in base_groups]
    return rows, only_base, only_new


def _text(summary: aggregate.Summary | None, metric: str) -> str:
    if summary is None:
        return "n/a"
    scale = METRICS[metric][1]
    return f"{summary.text(scale, 2 if scale == 1 else 0)} (n={summary.n})"


def run(args) -> int:
    threshold = parse_threshold(args.threshold)
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    unknown = [m for m in metrics if m not in METRICS]
    if unknown or not metrics:
        raise UsageError(f"unknown metric {', '.join(unknown) or '(none)'} (choices: {choices(METRICS)})")
    chosen = selection(args)  # the same selection on both sides
    base, new = load.load([args.base], **chosen), load.load([args.new], **chosen)
    for path, records in ((args.base, base), (args.new, new)):
        if not records:  # a gate that passes on nothing would hide a broken pipeline
            raise UsageError(f"no records in {path}: nothing to compare")
    rows, only_base, only_new = compare(base, new, threshold, metrics)
    print(f"compare: {args.base} (base) vs {args.new} (new), threshold {100 * threshold:g}%; regression = change "
          "beyond the threshold and the 95% intervals apart")
    print("| configuration | metric | base mean ± CI | new mean ± CI | change | verdict | base runs | new runs |")
    print("|---|---|---|---|---|---|---|---|")
    regressions = 0
    for key, verdicts in rows:
        for v in verdicts:
            regressions += v.verdict == "regression" or v.verdict.startswith("failed")
            unit = METRICS[v.metric][2]
            change = "n/a" if v.change is None else f"{100 * v.change:+.1f}%"
            print(f"| {keys.describe(dict(zip(keys.KEY_FIELDS, key)))} | {v.metric} ({unit}) | "
                  f"{_text(v.base, v.metric)} | {_text(v.new, v.metric)} | {change} | "
                  f"{v.verdict.upper() if v.verdict == 'regression' else v.verdict} | "
                  f"{v.base.ids if v.base else '-'} | {v.new.ids if v.new else '-'} |")
    for title, items in (("only in base (not compared)", only_base), ("only in new (not compared)", only_new)):
        if items:
            print(f"\n{title}:")
            for key, records in items:
                print(f"- {keys.describe(dict(zip(keys.KEY_FIELDS, key)))} — runs {keys.ids(records)}")
    print(f"\n{len(rows)} matched configurations, {regressions} regressions, "
          f"{len(only_base)} only in base, {len(only_new)} only in new")
    return 1 if regressions else 0
