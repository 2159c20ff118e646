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
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from benchmarks.errors import UsageError
from benchmarks.durable import append_or_fallback, check_dir

from .. import dispatch, reports, runtimes
from .report import Document, section_runtimes
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


def summary(records: list[dict], out: Path, no_record: list[str] = ()) -> str:
    """compare.md and compare.png: `benchrun report`'s runtime section over these records, and
    the runs that did not finish; returns the Markdown."""
    doc = Document()
    section_runtimes(doc, records, out, chart_name=lambda index: "compare.png" if index == 0 else f"compare-{index + 1}.png")
    failed = [f"{reports.runtime_of(r)}: run {r['run_id'][:reports.ID_PREFIX]} {r['status']}: "
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
    for req in requests.values():  # convert/load images once, up front
        dispatch.prepare(req, runtimes.get(req.runtime))  # cached: later runs reuse it
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    samples: dict[str, list[float]] = {name: [] for name in names}
    records: list[dict] = []
    no_record: list[str] = []
    rows_csv = []
    for round_ in range(1, args.repeats + 1):
        for name in names:
            req = requests[name]
            req.run_id = dispatch.RunRequest([]).run_id  # a fresh container name per run
            outcome = dispatch.run(req)
            record = outcome.record
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
    table = summary(records, out, no_record)
    (out / "compare.md").write_text(table)
    print(table, end="")
    return 130 if outcome.interrupted else (0 if all(samples.values()) else 1)
