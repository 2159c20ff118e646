"""`benchrun compare-runtimes`: one benchmark under several container runtimes, interleaved.

    benchrun compare-runtimes --runtimes local,docker,podman,charliecloud --repeats 3 --out DIR -- \\
        --framework tensorflow --model resnet50 --image-size 64 --batch-size 4 --num-batches 5

Rounds run every runtime once, so slow drifts of the machine hit all runtimes alike. Each record
keeps the runtime asked for (provenance.requested_runtime) and its round and position (section
`comparison`); the summary is `benchrun report`'s runtime section over these records, so both print
the same numbers: per runtime, mean images/sec with a 95% t-interval over the runs, and against
`local` (and `docker` where both ran) the throughput ratio with its 95% interval, paired by round,
and a verdict at --margin percent: `equivalent (±M%)`, `slower by X% [lo, hi]`, `faster by X% [lo, hi]`
or `inconclusive: ±H% now; about N more rounds for ±M%`; where the runs' paths differ from the
reference's (section `path`), the difference is named beside the verdict, and as the likely cause of
a resolved slowdown; whether the position in the round shifted throughput. Definitions:
docs/reports.md#verdicts-with-intervals. Written to --out: records.jsonl (the records, unchanged),
compare.md (the tables), compare.png (bars with 95% error bars), compare.csv (one row per run, with
the record's run_id, comparison id, seed and position) and verdicts.csv (one row per runtime and
reference: ratio or difference, its interval, method, rounds, margin, verdict, path differences).

Launch overhead, per runtime: bench runs with --mllog, and the wall-clock times of its
`init_start` (bench is up: runtime started, Python and bench imported) and of the first timed
step (`epoch_start` of repeat 0: model built, warm-up done) are taken against the moment
benchrun issued the run (the same host clock inside every container; the latest rank counts);
the differences against the references, paired by round, get verdicts at --launch-margin seconds.
Each run's stdout (bench's lines, the MLLOG lines) is kept in logs/ beside the records.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.cli import bench_arguments
from benchmarks.errors import UsageError
from benchmarks.durable import append_or_fallback, check_dir
from benchmarks.stats import t_halfwidth

from .. import dispatch, runtimes
from ..reporting import aggregate, equivalence, keys
from ..reporting.render import Document
from .report import add_margin, fmt_estimate, interval_text, margin_of, positive, section_runtimes
from .run import add_runtime_options, request


def add_parser(sub) -> None:
    p = sub.add_parser("compare-runtimes", help="compare container runtimes on one benchmark", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtimes", help="comma-separated (default: every available one)")
    p.add_argument("--repeats", type=int, default=3, help="rounds over all runtimes (default: 3)")
    p.add_argument("--out", required=True, help="directory for compare.{md,csv,png} and records.jsonl")
    add_margin(p)
    p.add_argument("--launch-margin", type=float, default=equivalence.DEFAULT_LAUNCH_MARGIN, metavar="SECONDS",
                   help="equivalence margin of the launch verdicts: a difference within ±SECONDS counts as "
                        f"equivalent (default: {equivalence.DEFAULT_LAUNCH_MARGIN:g})")
    add_runtime_options(p)
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then bench's own arguments")
    p.set_defaults(run=run)


def throughput(record: dict | None) -> float | None:
    if not record or record.get("status") != "ok" or not record.get("throughput"):
        return None
    return record["throughput"].get("images_per_sec")


MLLOG = ":::MLLOG "
LAUNCH_EVENTS = {"init_start": "bench_up_s", "epoch_start": "first_step_s"}  # MLLOG key -> column


@contextlib.contextmanager
def stdout_to(path: Path):
    """This process's fd 1 (inherited by the run's processes) into `path` for the block."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def launch_times(log: Path, issued: float) -> dict[str, float | None]:
    """Seconds from `issued` (epoch) to bench's init_start and first timed step in the run's MLLOG
    lines (the latest rank); None where the run never got there."""
    latest: dict[str, float] = {}
    text = log.read_text(errors="replace") if log.exists() else ""
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith(MLLOG):
            continue
        try:
            event = json.loads(line[len(MLLOG):])
        except ValueError:
            continue
        key = event.get("key")
        if key in LAUNCH_EVENTS and (key != "epoch_start" or event.get("value") == 0):
            latest[key] = max(latest.get(key, 0.0), event["time_ms"] / 1000)
    return {column: (latest[key] - issued if key in latest else None) for key, column in LAUNCH_EVENTS.items()}


@dataclass(frozen=True)
class LaunchVerdict:
    runtime: str
    reference: str
    column: str  # a LAUNCH_EVENTS column
    verdict: equivalence.Verdict


def launch_verdicts(launches: dict[str, list[dict]], margin: float) -> list[LaunchVerdict]:
    """Each runtime's launch times against each reference that ran (aggregate.REFERENCES), in seconds, paired
    by round: a launch's `round` where it has one, else its place in the runtime's list (run() appends one
    per round)."""
    def by_round(runs: list[dict], column: str) -> dict:
        return {t.get("round", i + 1): t[column] for i, t in enumerate(runs) if t[column] is not None}

    found = []
    for name, runs in launches.items():
        for reference in aggregate.REFERENCES:
            if reference == name or not launches.get(reference):
                continue
            for column in LAUNCH_EVENTS.values():
                mine, theirs = by_round(runs, column), by_round(launches[reference], column)
                pairs = [(value, theirs[key]) for key, value in mine.items() if key in theirs]
                verdict = equivalence.seconds_verdict(pairs, list(mine.values()), list(theirs.values()), margin)
                found.append(LaunchVerdict(name, reference, column, verdict))
    return found


LAUNCH_TITLES = {"bench_up_s": "to bench up", "first_step_s": "to first timed step"}


def section_launch(doc: Document, launches: dict[str, list[dict]],
                   margin: float = equivalence.DEFAULT_LAUNCH_MARGIN) -> list[LaunchVerdict]:
    """Per runtime: time from benchrun issuing the run to bench up and to the first timed step, and the
    differences against the references with verdicts at `margin` seconds. Returns the verdicts."""
    doc.heading("Launch overhead", 3)
    doc.para("Seconds from benchrun issuing the run to bench's `init_start` (runtime started, Python and "
             "bench imported) and to its first timed step (`epoch_start` of repeat 0: model built, warm-up "
             "done), from the MLLOG wall-clock stamps; mean ± 95% t-interval over the runs. Differences "
             "(runtime − reference, positive = later) are paired by round, with their 95% interval; verdict: "
             "slower/faster where it excludes 0, equivalent where the 90% interval lies within "
             f"±{margin:g} s (--launch-margin), else inconclusive.")

    def summary_of(runs: list[dict], column: str) -> str:
        values = [t[column] for t in runs if t[column] is not None]
        return aggregate.Summary(values, [], t_halfwidth(values), "t-interval over runs").text() if values else "n/a"

    doc.table(["runtime", "runs", *(f"{title} (s)" for title in LAUNCH_TITLES.values())],
              [[name, len(runs), *(summary_of(runs, column) for column in LAUNCH_EVENTS.values())]
               for name, runs in launches.items()])
    found = launch_verdicts(launches, margin)
    if found:
        doc.table(["runtime", "vs", "time", "difference [95% CI]", "interval", "verdict"],
                  [[v.runtime, v.reference, LAUNCH_TITLES[v.column], fmt_estimate(v.verdict), interval_text(v.verdict),
                    v.verdict.text] for v in found])
    return found


VERDICT_COLUMNS = ("configuration", "measure", "runtime", "reference", "estimate", "ci_lo", "ci_hi", "method", "rounds",
                   "margin", "verdict", "path_differences")


def verdict_rows(groups: list[aggregate.RuntimeGroup], launches: list[LaunchVerdict],
                 margin: float, launch_margin: float) -> list[dict]:
    """verdicts.csv: one row per configuration × runtime × reference (throughput: the ratio), then the
    launch rows (seconds; the configuration is the comparison's one)."""
    def row(configuration, measure, runtime, reference, verdict, margin_text, text, path) -> dict:
        ci = verdict.ci()
        found = verdict.interval
        number = lambda v: "" if v is None else f"{v:.6g}"  # noqa: E731
        return dict(zip(VERDICT_COLUMNS, [configuration, measure, runtime, reference, number(verdict.estimate),
                                          number(ci and ci[0]), number(ci and ci[1]), found.method if found else "",
                                          found.n if found else 0, margin_text, text, path]))

    rows = [row(keys.describe(g.key, keys.without("runtime")), "images_per_sec ratio", r.runtime, v.reference,
                v.verdict, f"{100 * margin:g}%", v.text, " / ".join(v.path))
            for g in groups for r in g.rows for v in r.verdicts]
    rows += [row("", f"{v.column} difference", v.runtime, v.reference, v.verdict, f"{launch_margin:g} s",
                 v.verdict.text, "") for v in launches]
    return rows


def summary(records: list[dict], out: Path, no_record: list[str] = (),
            launches: dict[str, list[dict]] | None = None, margin: float = equivalence.DEFAULT_MARGIN,
            launch_margin: float = equivalence.DEFAULT_LAUNCH_MARGIN) -> str:
    """compare.md's Markdown (returned), compare.png and verdicts.csv: `benchrun report`'s runtime section
    over these records, the launch overhead, and the runs that did not finish."""
    doc = Document()
    groups = section_runtimes(doc, records, out, chart_name=lambda index: "compare.png" if index == 0
                              else f"compare-{index + 1}.png", margin=margin)
    found = section_launch(doc, launches, launch_margin) if launches else []
    failed = [f"{keys.runtime_of(r)}: run {r['run_id'][:keys.ID_PREFIX]} {r['status']}: "
              f"{(r['error'] or {}).get('message', '')}" for r in records if r["status"] != "ok"]
    if failed or no_record:
        doc.heading("Runs that did not finish", 3)
        doc.bullets([*failed, *no_record])
    with open(out / "verdicts.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=VERDICT_COLUMNS)
        writer.writeheader()
        writer.writerows(verdict_rows(groups, found, margin, launch_margin))
    return doc.markdown()


def comparison_columns(record: dict | None) -> dict[str, str]:
    """compare.csv's comparison_id, seed and position of a run, from its record's comparison section."""
    comparison = (record or {}).get("comparison") or {}
    return {name: "" if comparison.get(field) is None else str(comparison[field])
            for name, field in (("comparison_id", "id"), ("seed", "seed"), ("position", "position"))}


def run(args) -> int:
    if args.repeats < 1:
        raise UsageError(f"--repeats must be 1 or more, got {args.repeats}")
    margin, launch_margin = margin_of(args), positive(args.launch_margin, "--launch-margin")
    check_dir(args.out, "--out")
    names = [n for n in (args.runtimes or "").split(",") if n] or runtimes.available()
    for name in names:
        runtimes.get(name).require()  # unknown or missing: one line, before anything runs
    requests = {name: request(args, name) for name in names}
    for req in requests.values():
        if not bench_arguments(req.bench_args).mllog:
            req.bench_args = [*req.bench_args, "--mllog"]  # the launch timestamps
        dispatch.prepare(req, runtimes.get(req.runtime))  # images converted/loaded once, up front: later runs reuse them
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    samples: dict[str, list[float]] = {name: [] for name in names}
    launches: dict[str, list[dict]] = {name: [] for name in names}
    records: list[dict] = []
    no_record: list[str] = []
    rows_csv = []
    for round_ in range(1, args.repeats + 1):
        for name in names:
            req = requests[name]
            req.run_id = dispatch.RunRequest([]).run_id  # a fresh container name per run
            log = out / "logs" / f"round{round_}-{name}-{req.run_id}.log"
            issued = time.time()
            with stdout_to(log):
                outcome = dispatch.run(req)
            record = outcome.record
            launch = launch_times(log, issued)
            launches[name].append(launch)
            if record is not None:
                append_or_fallback(out / "records.jsonl", record, f"dlbench-record-{record['run_id']}.jsonl")
                records.append(record)
            else:
                no_record.append(f"{name}: round {round_}: bench wrote no record (exit {outcome.exit_code})")
            value = throughput(record)
            if value is not None:
                samples[name].append(value)
            prov = (record or {}).get("provenance", {})
            rows_csv.append({"round": round_, "runtime": name, **comparison_columns(record),
                             "run_id": (record or {}).get("run_id", ""),
                             "status": (record or {}).get("status", f"no record (exit {outcome.exit_code})"),
                             "images_per_sec": "" if value is None else f"{value:.4f}",
                             "container_runtime": prov.get("container_runtime", ""), "image": prov.get("image") or "",
                             **{column: "" if t is None else f"{t:.3f}" for column, t in launch.items()}})
            first_step = launch["first_step_s"]
            print(f"compare-runtimes: round {round_}/{args.repeats} {name}: "
                  f"{'failed' if value is None else f'{value:.2f} img/s'}"
                  f"{'' if first_step is None else f', first timed step after {first_step:.1f} s'}", flush=True)
            if outcome.interrupted:
                break
        if outcome.interrupted:
            print("compare-runtimes: interrupted: summarizing the runs so far", flush=True)
            break
    with open(out / "compare.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows_csv[0]))
        writer.writeheader()
        writer.writerows(rows_csv)
    table = summary(records, out, no_record, launches, margin, launch_margin)
    (out / "compare.md").write_text(table)
    print(table, end="")
    return 130 if outcome.interrupted else (0 if all(samples.values()) else 1)
