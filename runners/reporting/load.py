"""The records of result stores, as the tables read them.

DuckDB (runners.reporting.scan) keeps the fields the tables use (FIELDS) and computes
each record's configuration key (runners.reporting.keys) and its group; the records
come back as slim mappings shaped like the record, holding only FIELDS. The sections
few distinct values fill (SHARED) are one object per distinct value, so a long
history of a few configurations fits in memory. `bench comm` records are few and
shaped otherwise (benchmarks/comm/record.py): they are read whole, in Python.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from benchmarks.comm.record import is_comm
from benchmarks.core.errors import UsageError

from .. import store
from . import scan
from .keys import KEY, conditions

# The record fields the tables, plots and the gate read
FIELDS = (
    "run_id", "timestamp_utc", "status", "kind", "error.kind", "error.message",
    *(f"config.{name}" for name in ("framework", "model", "batch_size", "image_size", "precision", "compile", "xla",
                                    "data", "strategy", "num_ps", "ps_placement", "device", "seed", "target_accuracy",
                                    "lr_rule", "base_lr")),
    "world.workers", "world.hosts", "world.launcher",
    *(f"provenance.{name}" for name in ("hostname", "cpu_model", "cpu_count", "container_runtime", "requested_runtime",
                                        "image", "dlbench_version", "python")),
    *(f"provenance.framework.{name}" for name in ("name", "version", "device_kind", "device_name", "cuda_version",
                                                  "cudnn_version")),
    "throughput.images_per_sec", "throughput.ci95_halfwidth", "throughput.ci_method",
    *(f"memory.{name}" for name in ("allocator_peak_bytes", "reserved_peak_bytes", "device_peak_bytes",
                                    "host_rss_peak_bytes")),
    "step_time_s.mean", "input_wait_s.mean", "model.parameters",
    "flops.achieved_flops_per_sec", "flops.mfu", "energy.images_per_joule",
    *(f"batch_search.{name}" for name in ("search_id", "probe", "final", "max_batch", "stop_reason")),
    "trace",  # whole (null in most records)
    "ranks",  # whole: each rank's host, step times and ceiling, where "why" names a straggler (why.find_straggler)
    "accuracy",  # whole: time-to-accuracy runs only (runners/accuracy.py)
    *(f"comparison.{name}" for name in ("id", "seed", "round", "position")),  # compare-runtimes' rounds (1.18)
    "path",  # whole: the path facts set beside a runtime's verdict (benchmarks/results/fingerprint.py)
)
SHARED = ("config", "world", "provenance", "error", "model")  # few distinct values in a long history: one dict each
UNIQUE = ("run_id", "timestamp_utc")  # text not worth interning


def print_warning(message: str) -> None:
    print(f"benchrun: warning: {message}", file=sys.stderr)


class SlimRecord(Mapping):
    """A record (or one of its flat sections) holding only some fields, read like the record's dict
    (r["config"], r.get("trace")): slots instead of a dict, half the memory at a million records."""

    __slots__ = ()
    fields: tuple[str, ...] = ()

    def __init__(self, values: Iterable):
        for name, value in zip(self.fields, values):
            setattr(self, name, value)

    def __getitem__(self, name: str):
        try:
            return getattr(self, name)
        except (AttributeError, TypeError):
            raise KeyError(name) from None

    def get(self, name: str, default=None):
        return getattr(self, name, default)

    def __iter__(self):
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


def slim_type(name: str, fields: Iterable[str], *extra: str) -> type:
    fields = tuple(fields)
    return type(name, (SlimRecord,), {"__slots__": fields + extra, "fields": fields})


def _intern(value):
    return None if value is None else sys.intern(value)


def _parts(cols: dict[str, str], share: set[str]) -> tuple[list[str], list[tuple[str, Callable]], dict[str, int]]:
    """(SELECT expressions over `r`, (top-level field, (row, shared values) -> its value) per field,
    shared section -> its SELECT position).
    Sections named in `share` come as ids into one parsed value per distinct value (see `read`);
    other flat sections as their fields plus a null flag (short text interned); anything else whole,
    as JSON."""
    select, parts, shared_at = [], [], {}
    for name, kind in cols.items():
        at = len(select)
        flat = scan.flat_fields(kind)
        if name in share:
            shared_at[name] = at
            select.append(f'r."{name}"')
            parts.append((name, lambda row, shared, at=at, name=name: None if row[at] is None else shared[name][row[at]]))
        elif flat is not None:
            select.append(f'r."{name}" IS NULL')
            select.extend(f'r."{name}"."{field}"' for field, _ in flat)
            section = slim_type(name, (field for field, _ in flat))
            read = [_intern if kind == "VARCHAR" else None for _, kind in flat]
            parts.append((name, lambda row, shared, at=at, section=section, read=read: None if row[at] else section(
                value if convert is None else convert(value) for convert, value in zip(read, row[at + 1:at + 1 + len(read)]))))
        elif kind.startswith("STRUCT(") or kind.endswith("]") or kind == "JSON":
            select.append(f'to_json(r."{name}")')
            parts.append((name, lambda row, shared, at=at: None if row[at] is None else json.loads(row[at])))
        else:
            select.append(f'r."{name}"')
            if kind == "VARCHAR" and name not in UNIQUE:
                parts.append((name, lambda row, shared, at=at: _intern(row[at])))
            else:
                parts.append((name, lambda row, shared, at=at: row[at]))
    return select, parts, shared_at


def read(paths: Iterable[str | Path], warn: Callable[[str], None], **filters) -> tuple[list, list[str]]:
    """(the training records of `scan` in store order, holding only FIELDS, each with its configuration
    key (`key`: keys.KEY's values) as DuckDB computed it, equal keys one tuple; the stores that also
    hold `bench comm` records)."""
    cols = scan.columns([*scan.CHECKED, *FIELDS])
    select, parts, shared_at = _parts(cols, set(SHARED))
    keys = [expression.sql() for expression in KEY.values()]
    Record = slim_type("Record", (name for name, _ in parts), "key")
    found = []
    with scan.scan(paths, FIELDS, select + keys, warn=warn, **filters) as con:
        # each shared section's distinct values get ids (in DuckDB): only those cross into Python, as JSON;
        # each distinct key an id too, the records' group
        shared, joins, out = {}, [], [f"rows.c{i}" for i in range(len(select))]
        for name, at in shared_at.items():
            con.execute(f"CREATE TEMP TABLE shared_{name} AS SELECT value, to_json(value) AS json_text, "
                        f"(row_number() OVER (ORDER BY to_json(value))) - 1 AS id "
                        f"FROM (SELECT DISTINCT c{at} AS value FROM rows WHERE c{at} IS NOT NULL)")
            shared[name] = [json.loads(text) for text, in
                            con.execute(f"SELECT json_text FROM shared_{name} ORDER BY id").fetchall()]
            joins.append(f"LEFT JOIN shared_{name} ON rows.c{at} = shared_{name}.value")
            out[at] = f"shared_{name}.id"
        key_columns = ", ".join(f"rows.c{len(select) + i}" for i in range(len(keys)))
        con.execute(f"CREATE TEMP TABLE slim AS SELECT {', '.join(f'{e} AS c{i}' for i, e in enumerate(out))}, "
                    f"dense_rank() OVER (ORDER BY {key_columns}) - 1 AS key_id, {key_columns} "
                    f"FROM rows {' '.join(joins)} ORDER BY rows.rowid")
        con.execute("DROP VIEW records; DROP TABLE rows")  # its memory, before Python's grows
        groups = {row[0]: row[1:] for row in con.execute(
            f"SELECT DISTINCT key_id, {', '.join(f'c{len(select) + i}' for i in range(len(keys)))} FROM slim").fetchall()}
        result = con.execute(f"SELECT {', '.join(f'c{i}' for i in range(len(out)))}, key_id FROM slim")
        while rows := result.fetchmany(scan.BATCH):
            for row in rows:
                record = Record(make(row, shared) for _, make in parts)
                record.key = groups[row[-1]]
                found.append(record)
        comm_stores = [path for path, in con.execute("SELECT path FROM stores WHERE comm ORDER BY file").fetchall()]
    return found, comm_stores


def load(paths: Iterable[str | Path], warn: Callable[[str], None] | None = None, kind: str = "train", *,
         where: Iterable[str] = (), since: str | None = None, until: str | None = None) -> list:
    """The bench records of one kind in the given stores (files, or directories of *.jsonl; plain
    JSONL or sweep envelopes): training runs (kind "train") or `bench comm` runs (kind "comm");
    stores may hold both. A run_id seen twice counts once; `where` ("field=value[,value...]",
    keys.WHERE_FIELDS) and since/until (timestamps as scan.timestamp returns) select records
    (`where` does not apply to `bench comm` records)."""
    warn = warn or print_warning
    if kind == "comm":
        return comm_records(paths, warn, since, until)
    return read(paths, warn, where=conditions(where), since=since, until=until)[0]


def load_report(paths: Iterable[str | Path], warn: Callable[[str], None] | None = None, *, where: Iterable[str] = (),
                since: str | None = None, until: str | None = None) -> tuple[list, list[dict]]:
    """(training records, `bench comm` records) of the stores, as load gives them, read once: the
    Python pass for comm records reads only the stores DuckDB saw such records in."""
    records, stores = read(paths, warn or print_warning, where=conditions(where), since=since, until=until)
    return records, comm_records(stores, lambda message: None, since, until) if stores else []


def comm_records(paths, warn: Callable[[str], None], since: str | None, until: str | None) -> list[dict]:
    seen, out = set(), []
    for path in scan.store_files(paths):
        for record in _parsed(path, warn, mentioning=b'"comm"'):
            if (is_comm(record) and record.get("run_id") not in seen and (not since or record.get("timestamp_utc", "") >= since)
                    and (not until or record.get("timestamp_utc", "") < until)):
                seen.add(record.get("run_id"))
                out.append(record)
    return out


def _parsed(path, warn: Callable[[str], None], mentioning: bytes | None = None) -> list[dict]:
    """A store's records parsed whole in Python (runners.store), its warnings passed on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", store.StoreWarning)
        try:
            found = list(store.iter_records(path, mentioning=mentioning))
        except OSError as error:
            raise UsageError(f"{str(path)!r} cannot be read ({error.strerror})") from None
    for warning in caught:
        warn(str(warning.message))
    return found


def load_python(paths: Iterable[str | Path], warn: Callable[[str], None] | None = None, kind: str = "train") -> list[dict]:
    """Whole records, parsed in Python: the reference the DuckDB reader is tested against
    (tests/test_reports_columnar.py, tests/test_reports_scale.py)."""
    records = []
    for path in paths:
        if not Path(path).is_file():
            raise UsageError(f"{str(path)!r} is not a file")
        found = _parsed(path, warn or print_warning)
        for record in found:
            config = record.get("config")
            if not (isinstance(config, dict) and {"framework", "model"} <= set(config)
                    and isinstance(record.get("status"), str) and isinstance(record.get("run_id"), str)):
                raise UsageError(f"{str(path)!r} holds a JSON line that is not a dlbench record "
                                 "(needs run_id, status, config.framework, config.model)")
        records.extend(found)
    return [r for r in records if is_comm(r) == (kind == "comm")]
