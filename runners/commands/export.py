"""`benchrun export`: every record of one or more stores as one CSV row.

    benchrun export RESULTS.jsonl [MORE.jsonl ...] --csv OUT.csv

Columns are fixed and documented in docs/reports.md (COLUMNS below); a value
that does not apply is an empty cell, never 0.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from .. import reports


def _get(record: dict, path: str):
    value = record
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _mean_wait_fraction(record: dict):
    repeats = record.get("repeats") or []
    return sum(r["input_wait_fraction"] for r in repeats) / len(repeats) if repeats else None


CONFIG_FIELDS = ("framework", "model", "batch_size", "image_size", "num_warmup_batches", "num_batches", "repeats",
                 "precision", "data_format", "device", "num_threads", "num_data_workers", "data_dir", "data", "seed",
                 "xla", "compile", "synthetic_batches", "num_classes", "strategy", "num_ps", "ps_placement")

# column name -> how to read it from a record (dotted path into the record, or a function)
COLUMNS: dict[str, object] = {
    "run_id": "run_id",
    "timestamp_utc": "timestamp_utc",
    "status": "status",
    "error.kind": "error.kind",
    "error.message": "error.message",
    **{f"config.{name}": f"config.{name}" for name in CONFIG_FIELDS},
    "model.parameters": "model.parameters",
    "throughput.images_per_sec": "throughput.images_per_sec",
    "throughput.ci95_halfwidth": "throughput.ci95_halfwidth",
    "throughput.ci_method": "throughput.ci_method",
    "throughput.total_images": "throughput.total_images",
    "throughput.total_wall_time_s": "throughput.total_wall_time_s",
    "step_time_s.mean": "step_time_s.mean",
    "step_time_s.median": "step_time_s.median",
    "step_time_s.p90": "step_time_s.p90",
    "step_time_s.jitter": "step_time_s.jitter",
    "input_wait_s.mean": "input_wait_s.mean",
    "input_wait_fraction": _mean_wait_fraction,
    "repeats.count": lambda r: len(r.get("repeats") or []),
    "memory.allocator_peak_bytes": "memory.allocator_peak_bytes",
    "memory.reserved_peak_bytes": "memory.reserved_peak_bytes",
    "memory.device_peak_bytes": "memory.device_peak_bytes",
    "memory.device_total_bytes": "memory.device_total_bytes",
    "memory.host_rss_peak_bytes": "memory.host_rss_peak_bytes",
    "memory.host_rss_peak_since": "memory.host_rss_peak_since",
    "final_loss": "final_loss",
    "precision.effective": "precision.effective",
    "flops.forward_per_image": "flops.forward_per_image",
    "flops.achieved_flops_per_sec": "flops.achieved_flops_per_sec",
    "flops.mfu": "flops.mfu",
    "world.workers": "world.workers",
    "world.processes": "world.processes",
    "world.num_ps": "world.num_ps",
    "world.nodes": "world.nodes",
    "world.launcher": "world.launcher",
    "world.hosts": lambda r: ";".join(r["world"]["hosts"]),
    "replicas.in_sync": "replicas.in_sync",
    "duration_s": "duration_s",
    "provenance.hostname": "provenance.hostname",
    "provenance.cpu_model": "provenance.cpu_model",
    "provenance.cpu_count": "provenance.cpu_count",
    "provenance.container_runtime": "provenance.container_runtime",
    "provenance.requested_runtime": "provenance.requested_runtime",
    "provenance.image": "provenance.image",
    "provenance.dlbench_version": "provenance.dlbench_version",
    "provenance.python": "provenance.python",
    "provenance.framework.name": "provenance.framework.name",
    "provenance.framework.version": "provenance.framework.version",
    "provenance.framework.device_kind": "provenance.framework.device_kind",
    "provenance.framework.device_name": "provenance.framework.device_name",
    "provenance.framework.device_count": "provenance.framework.device_count",
    "provenance.framework.cuda_version": "provenance.framework.cuda_version",
    "provenance.framework.cudnn_version": "provenance.framework.cudnn_version",
}


def row(record: dict) -> list:
    values = []
    for getter in COLUMNS.values():
        value = getter(record) if callable(getter) else _get(record, getter)
        values.append("" if value is None else value)
    return values


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="flatten records to CSV (columns: docs/reports.md)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stores", nargs="+", help="bench JSONL files or sweep stores")
    p.add_argument("--csv", required=True, help="CSV file to write (replaced)")
    p.set_defaults(run=run)


def run(args) -> int:
    from benchmarks.durable import check_file

    check_file(args.csv, "--csv")
    records = reports.load(args.stores)
    target = Path(args.csv)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        writer.writerows(row(record) for record in records)
    print(f"wrote {len(records)} records, {len(COLUMNS)} columns to {target}")
    return 0
