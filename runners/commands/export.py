"""`benchrun export`: every record of one or more stores as one row (CSV, Parquet) or one MLflow run.

    benchrun export RESULTS.jsonl [MORE.jsonl DIR ...] --csv OUT.csv [--parquet OUT.parquet]
    benchrun export RESULTS.jsonl [MORE.jsonl DIR ...] --mlflow [TRACKING_URI] [--mlflow-experiment NAME]

Columns are fixed and documented in docs/reports.md; a value that does not
apply is an empty cell (CSV) or null (Parquet), never 0. Rows stream to the
file (DuckDB reads the stores): memory does not grow with the store. Each file
is written beside its target and renamed into place once complete.

--mlflow logs one MLflow run per record (training and `bench comm` records), to
TRACKING_URI or else $MLFLOW_TRACKING_URI (docs/mlflow.md: every param, metric
and tag); a record already exported there is skipped, so exporting twice stores
once. Exit codes: 0 done, 2 bad input or MLflow not installed in this Python,
6 the tracking store could not be reached or refused a write (one line; no run
is left RUNNING: a run begun is marked FAILED and deleted, or replaced by the
next export).
"""

from __future__ import annotations

import argparse
import csv
import os
import warnings
from pathlib import Path

from benchmarks.core import durable
from benchmarks.core.durable import check_file
from benchmarks.core.errors import UsageError

from .. import mlflow_export, store
from ..reporting import keys, load, scan
from .report import add_selection, selection

CONFIG_FIELDS = ("framework", "model", "batch_size", "image_size", "num_warmup_batches", "num_batches", "repeats",
                 "precision", "data_format", "device", "num_threads", "num_data_workers", "data_dir", "data", "seed",
                 "xla", "compile", "synthetic_batches", "num_classes", "strategy", "num_ps", "ps_placement", "step_timing")


def _same(*paths: str) -> dict[str, str]:
    """Columns named as the record field they hold."""
    return {path: path for path in paths}


def _in(section: str, *names: str) -> tuple[str, ...]:
    return tuple(f"{section}.{name}" for name in names)


# column name -> a dotted path into the record, or (SQL over the record `r` of runners.reporting.scan, the paths it reads)
COLUMNS: dict[str, str | tuple[str, tuple[str, ...]]] = {
    **_same("run_id", "timestamp_utc", "status", *_in("error", "kind", "message"), *_in("config", *CONFIG_FIELDS),
            "model.parameters",
            *_in("throughput", "images_per_sec", "ci95_halfwidth", "ci_method", "total_images", "total_wall_time_s"),
            *_in("step_time_s", "mean", "median", "p90", "jitter"), "input_wait_s.mean"),
    "input_wait_fraction": ("list_sum(list_transform(r.repeats, lambda x: x.input_wait_fraction)) "
                            "/ nullif(len(r.repeats), 0)", ("repeats.input_wait_fraction",)),  # mean over repeats
    "repeats.count": ("coalesce(len(r.repeats), 0)", ("repeats.input_wait_fraction",)),
    **_same(*_in("memory", "allocator_peak_bytes", "reserved_peak_bytes", "device_peak_bytes", "device_total_bytes",
                 "host_rss_peak_bytes", "host_rss_peak_since"),
            "final_loss", "precision.effective", *_in("flops", "forward_per_image", "achieved_flops_per_sec", "mfu"),
            *_in("energy", "joules", "images_per_joule"), *_in("world", "workers", "processes", "num_ps", "nodes", "launcher")),
    "world.hosts": ("array_to_string(r.world.hosts, ';')", ("world.hosts",)),
    **_same("replicas.in_sync", "duration_s",
            *_in("provenance", "hostname", "cpu_model", "cpu_count", "container_runtime", "requested_runtime", "image",
                 "dlbench_version", "python"),
            *_in("provenance.framework", "name", "version", "device_kind", "device_name", "device_count", "cuda_version",
                 "cudnn_version")),
}


def projection() -> tuple[list[str], list[str]]:
    """(record paths to read, one SQL expression per column)."""
    fields, select = [], []
    for column in COLUMNS.values():
        if isinstance(column, str):
            fields.append(column)
            select.append(keys.Field(column).sql())
        else:
            select.append(column[0])
            fields.extend(column[1])
    return fields, select


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="flatten records to CSV and/or Parquet (columns: docs/reports.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stores", nargs="+", help="bench JSONL files, sweep stores, or directories of them (*.jsonl)")
    p.add_argument("--csv", help="CSV file to write (replaced)")
    p.add_argument("--parquet", help="Parquet file to write (replaced): the same columns, typed (pandas, Polars, Spark)")
    mlflow_export.add_options(p, "log one MLflow run per record")
    add_selection(p)
    p.set_defaults(run=run)


def _copy(con, sql: str, partial: Path) -> None:
    """DuckDB's COPY; its I/O error when the file system takes no more is that OSError (durable.NO_ROOM), found by
    the file system's own answer (DuckDB says it in words only)."""
    import duckdb

    try:
        con.execute(sql)
    except duckdb.IOException as error:
        for code in durable.NO_ROOM:
            if os.strerror(code) in str(error):
                raise OSError(code, os.strerror(code), str(partial)) from None
        raise


def run(args) -> int:
    if not args.csv and not args.parquet and args.mlflow is None:
        raise UsageError("export needs --csv OUT.csv, --parquet OUT.parquet and/or --mlflow [TRACKING_URI]")
    for flag, path in (("--csv", args.csv), ("--parquet", args.parquet)):
        if path:
            check_file(path, flag)
    if args.mlflow is not None:
        to_mlflow(args)
        if not args.csv and not args.parquet:
            return 0
    fields, select = projection()
    chosen = selection(args)
    chosen["where"] = keys.conditions(chosen["where"])
    written = []
    with scan.scan(args.stores, fields, select, warn=load.print_warning, **chosen) as con:
        count = con.execute("SELECT count(*) FROM records").fetchone()[0]
        if args.csv:
            with durable.staged_file(args.csv, f"--csv {args.csv!r}") as partial, \
                    partial.open("w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(COLUMNS)
                result = con.execute("SELECT * FROM records")
                while batch := result.fetchmany(scan.BATCH):
                    writer.writerows(batch)  # the csv module writes None as an empty cell
            written.append(args.csv)
        if args.parquet:
            with durable.staged_file(args.parquet, f"--parquet {args.parquet!r}") as partial:
                names = ", ".join(f'c{i} AS "{name}"' for i, name in enumerate(COLUMNS))
                _copy(con, f"COPY (SELECT {names} FROM records) TO '{str(partial).replace(chr(39), chr(39) * 2)}' "
                      "(FORMAT parquet)", partial)
            written.append(args.parquet)
    print(f"wrote {count} records, {len(COLUMNS)} columns to {' and '.join(written)}")
    return 0


def chosen_entries(args):
    """(record, sweep section or None) of every record the selection keeps, once per run_id, in store
    order: DuckDB picks the run_ids as for --csv; the records are then read whole."""
    chosen = selection(args)
    chosen["where"] = keys.conditions(chosen["where"])
    with scan.scan(args.stores, ["run_id"], ["r.run_id"], warn=load.print_warning, **chosen) as con:
        wanted = {row[0] for row in con.execute("SELECT c0 FROM records").fetchall()}
    if not args.where:
        wanted |= {r["run_id"] for r in load.load(args.stores, kind="comm", since=chosen["since"], until=chosen["until"])}
    for path in scan.store_files(args.stores):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", store.StoreWarning)  # scan.scan has named them already
            for entry in store.iter_entries(path):
                record = entry["record"]
                if record is not None and record.get("run_id") in wanted:
                    wanted.discard(record["run_id"])
                    yield record, entry["sweep"]


def to_mlflow(args) -> None:
    tracker = mlflow_export.Tracker(args.mlflow or None, args.mlflow_experiment)
    known = tracker.existing()
    written = skipped = 0
    for record, sweep in chosen_entries(args):
        if tracker.export(record, sweep, known):
            written += 1
        else:
            skipped += 1
    print(f"mlflow: {written} runs logged, {skipped} already there, to experiment {args.mlflow_experiment!r} "
          f"at {tracker.uri}")
