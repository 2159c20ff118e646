"""`benchrun compare-runtimes`: one benchmark under several container runtimes, interleaved.

    benchrun compare-runtimes --runtimes local,docker,podman,charliecloud --repeats 3 --out DIR -- \\
        --framework tensorflow --model resnet50 --image-size 64 --batch-size 4 --num-batches 5

Rounds run every runtime once, in order (A B C A B C ...), so slow drifts of the
machine hit all runtimes alike. Each record keeps the runtime asked for
(provenance.requested_runtime); the summary is `benchrun report`'s runtime section
over these records, so both print the same numbers: per runtime, mean images/sec
with a 95% t-interval over the runs, overhead versus `local` and a Welch t-test
p-value against it. Written to --out: records.jsonl (the records, unchanged),
compare.md (the table), compare.png (bars with 95% error bars) and compare.csv
(one row per run, with the record's run_id).

Launch overhead, per runtime: bench runs with --mllog, and the wall-clock times of its
`init_start` (bench is up: runtime started, Python and bench imported) and of the first timed
step (`epoch_start` of repeat 0: model built, warm-up done) are taken against the moment
benchrun issued the run (the same host clock inside every container; the latest rank counts).
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
from pathlib import Path

from benchmarks.cli import bench_arguments
from benchmarks.errors import UsageError
from benchmarks.durable import append_or_fallback, check_dir
from benchmarks.stats import t_halfwidth

from .. import dispatch, runtimes
from ..reporting import aggregate, keys
from ..reporting.render import Document
from .report import fmt_p, section_runtimes
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


def section_launch(doc: Document, launches: dict[str, list[dict]]) -> None:
    """Per runtime: time from benchrun issuing the run to bench up and to the first timed step."""
    base = runtimes.BARE
    doc.heading("Launch overhead", 3)
    doc.para("Seconds from benchrun issuing the run to bench's `init_start` (runtime started, Python and "
             "bench imported) and to its first timed step (`epoch_start` of repeat 0: model built, warm-up "
             "done), from the MLLOG wall-clock stamps; mean ± 95% t-interval over the runs; Δ = difference of "
             f"means against `{base}`, p = Welch's t-test against `{base}`.")

    def summary_of(runs: list[dict], column: str) -> aggregate.Summary | None:
        values = [t[column] for t in runs if t[column] is not None]
        return aggregate.Summary(values, [], t_halfwidth(values), "t-interval over runs") if values else None

    rows = []
    for name, runs in launches.items():
        cells = [name, len(runs)]
        for column in LAUNCH_EVENTS.values():
            this, ref = summary_of(runs, column), summary_of(launches.get(base, []), column)
            compared = this is not None and ref is not None and name != base
            cells += ["n/a" if this is None else this.text(), f"{this.mean - ref.mean:+.2f}" if compared else "-",
                      fmt_p(aggregate.welch(ref.values, this.values)) if compared else "-"]
        rows.append(cells)
    doc.table(["runtime", "runs", "to bench up (s)", "Δ", "p", "to first timed step (s)", "Δ", "p"], rows)


def summary(records: list[dict], out: Path, no_record: list[str] = (),
            launches: dict[str, list[dict]] | None = None) -> str:
    """compare.md and compare.png: `benchrun report`'s runtime section over these records, the launch
    overhead, and the runs that did not finish; returns the Markdown."""
    doc = Document()
    section_runtimes(doc, records, out, chart_name=lambda index: "compare.png" if index == 0 else f"compare-{index + 1}.png")
    if launches:
        section_launch(doc, launches)
    failed = [f"{keys.runtime_of(r)}: run {r['run_id'][:keys.ID_PREFIX]} {r['status']}: "
              f"{(r['error'] or {}).get('message', '')}" for r in records if r["status"] != "ok"]
    if failed or no_record:
        doc.heading("Runs that did not finish", 3)
        doc.bullets([*failed, *no_record])
    return doc.markdown()


def run(args) -> int:
    if args.repeats < 1:
        raise UsageError(f"--repeats must be 1 or more, got {args.repeats}")
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
            rows_csv.append({"round": round_, "runtime": name, "run_id": (record or {}).get("run_id", ""),
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
    table = summary(records, out, no_record, launches)
    (out / "compare.md").write_text(table)
    print(table, end="")
    return 130 if outcome.interrupted else (0 if all(samples.values()) else 1)
