"""Reading result stores and turning records into the numbers reports and the gate show.

Pure data: no plotting, no printing. `benchrun report`, `compare` and `export`
(runners/commands/) build on these. Every aggregate carries n, mean, its 95%
half-width and the run_id prefixes it came from, so each table can say where
its numbers came from. Definitions: docs/reports.md.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sequence
from typing import Callable, Iterable, Iterator

import numpy as np

from benchmarks.comm.record import is_comm
from benchmarks.distributed import strategies
from benchmarks.errors import UsageError
from benchmarks.stats import Stats, t_halfwidth

from . import columnar, runtimes, store

ID_PREFIX = 8  # run_id characters shown in tables

# -- reading stores ------------------------------------------------------------------------------

# The record fields the tables, plots and the gate read: all runners.columnar keeps of a record.
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
    "accuracy",  # whole: time-to-accuracy runs only (runners/accuracy.py)
)
SHARED = ("config", "world", "provenance", "error", "model")  # few distinct values in a long history: one dict each
# Read beside the records as NumPy columns (Records): what every table asks of every record.
VALUES = ("status", "run_id", "timestamp_utc", "throughput.images_per_sec",
          *(f"memory.{name}" for name in ("allocator_peak_bytes", "reserved_peak_bytes", "device_peak_bytes",
                                          "host_rss_peak_bytes")),
          "flops.achieved_flops_per_sec", "flops.mfu", "energy.images_per_joule", "step_time_s.mean", "input_wait_s.mean",
          "batch_search.final")
PRESENT = ("throughput", "trace", "accuracy")


def print_warning(message: str) -> None:
    print(f"benchrun: warning: {message}", file=sys.stderr)


def load(paths: Iterable[str | Path], warn: Callable[[str], None] | None = None, kind: str = "train", *,
         where: Iterable[str] = (), since: str | None = None, until: str | None = None) -> list[dict]:
    """The bench records of one kind in the given stores (files, or directories of *.jsonl;
    plain JSONL or sweep envelopes): training runs (kind "train") or `bench comm` runs (kind
    "comm"); stores may hold both. Read through DuckDB (runners.columnar): each record holds
    only FIELDS; a run_id seen twice counts once; `where` ("field=value[,value...]", see
    WHERE_FIELDS) and since/until (timestamps as columnar.timestamp returns) select records.
    `bench comm` records are few and shaped otherwise (benchmarks/comm/record.py): they are
    read whole, in Python, parsing only the lines that mention "comm" (`where` does not apply)."""
    if kind == "comm":
        return _comm_records(paths, warn or print_warning, since, until)
    return _read(paths, warn, kind, where, since, until)[0]


def load_report(paths: Iterable[str | Path], warn: Callable[[str], None] | None = None, *, where: Iterable[str] = (),
                since: str | None = None, until: str | None = None) -> tuple[list[dict], list[dict]]:
    """(training records, `bench comm` records) of the stores, as load gives them, read once: the
    Python pass for comm records reads only the stores DuckDB saw such records in (scanning a
    store's bytes for them costs, at a million records, as much as DuckDB reading it)."""
    records, comm_stores = _read(paths, warn, "train", where, since, until)
    return records, _comm_records(comm_stores, lambda message: None, since, until) if comm_stores else []


def _read(paths, warn, kind: str, where, since, until) -> tuple[list[dict], list[str]]:
    found = columnar.read(paths, FIELDS, SHARED, values=VALUES, present=PRESENT, kind=kind, where=conditions(where),
                          since=since, until=until, warn=warn or print_warning)
    return Records.of(found), found.comm_stores


class _Columns:
    """What Records derived from one load share: the columns of runners.columnar.read, the records
    built so far, and what is computed once: the ok flags, run_id prefixes, and per record its
    "atom", the (config, world, provenance) objects that decide its configuration key (key_of)."""

    def __init__(self, found: columnar.Read):
        n = len(found.rows)
        self.rows = found.rows
        # each column as its values (masked ones: anything) and where it is null (None: nowhere)
        self.data = {name: np.ma.getdata(column) for name, column in found.columns.items()}
        self.null = {name: np.ma.getmaskarray(column) if np.ma.is_masked(column) else None
                     for name, column in found.columns.items()}
        self.objects = np.empty(n, dtype=object)  # records built so far (columnar.Rows)
        self.built = np.zeros(n, dtype=bool)
        self.ok = (self.data["status"] == "ok") & self.data["has throughput"]
        self.prefixes = np.fromiter((run_id[:ID_PREFIX] for run_id in self.data["run_id"].tolist()), dtype=object, count=n)
        self.atom = np.zeros(n, dtype=np.int64)
        for name in ("config", "world", "provenance"):  # ids (-1: null) combined pairwise: no overflow
            ids = self.data[f"id {name}"].astype(np.int64) + 1
            _, first, self.atom = np.unique(self.atom * (int(ids.max(initial=0)) + 1) + ids, return_index=True,
                                            return_inverse=True)
            self.atom = self.atom.reshape(-1)
        self.first = self.records(first)  # a record of each atom: its key is every such record's

    def records(self, index) -> list:
        """The records at these positions, built from the columns the first time one is asked for."""
        missing = index[~self.built[index]]
        if len(missing):
            self.objects[missing] = np.fromiter(self.rows.records(missing), dtype=object, count=len(missing))
            self.built[missing] = True
        return self.objects[index].tolist()


class Records(Sequence):
    """Records in store order with NumPy columns beside them (reports.load): a sequence of records
    (a slice of it is a list). What every table asks of every record many times (ok, group,
    throughput, metric, ids...) takes a fast path over the columns for a Records, and gives Records,
    whose records become Python objects in a list only when something iterates them; any other list
    of records takes the plain path. Both give the same results (tests/test_reports_scale.py runs
    the whole report both ways)."""

    __slots__ = ("table", "index", "_items")

    def __init__(self, table: _Columns, index):
        self.table, self.index, self._items = table, index, None

    @classmethod
    def of(cls, found: columnar.Read) -> "Records":
        """The records runners.columnar.read found."""
        return cls(_Columns(found), np.arange(len(found.rows)))

    def _list(self) -> list:
        if self._items is None:
            self._items = self.table.records(self.index)
        return self._items

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, at):
        return self._list()[at] if isinstance(at, slice) or self._items is not None else self.table.records(self.index[[at]])[0]

    def __iter__(self):
        return iter(self._list())

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None

    def __repr__(self) -> str:
        return f"Records({self._list()!r})"

    def take(self, positions) -> "Records":
        """The records at these positions (or where this boolean mask holds), in this order."""
        return Records(self.table, self.index[positions])

    def column(self, name: str):
        """A column (runners.columnar.read names) for these records, as a NumPy array (see `present`)."""
        return self.table.data[name][self.index]

    def present(self, name: str):
        """Where the column is not null, as a boolean array."""
        null = self.table.null[name]
        return np.ones(len(self.index), dtype=bool) if null is None else ~null[self.index]

    def values(self, path: str) -> list:
        """A scalar field of each record, None where null: [r[section][name] for r in self], as Python values."""
        out = self.column(path).tolist()
        if self.table.null[path] is not None:
            for at in np.flatnonzero(~self.present(path)).tolist():
                out[at] = None
        return out

    def group(self, fields: tuple) -> dict[tuple, "Records"]:
        atoms, count = self.table.atom[self.index], len(self.table.first)
        first = np.full(count, len(atoms))  # where each atom first appears here
        np.minimum.at(first, atoms, np.arange(len(atoms)))
        keys: dict[tuple, int] = {}  # in order of first appearance, as a pass over the records makes them
        code = np.zeros(count, dtype=np.int64)
        for atom in np.argsort(first, kind="stable")[:np.count_nonzero(first < len(atoms))].tolist():
            code[atom] = keys.setdefault(key_tuple(self.table.first[atom], fields), len(keys))
        codes = code[atoms].astype(np.uint16 if len(keys) <= 1 << 16 else np.int64)  # 16 bits: a radix sort
        order = np.argsort(codes, kind="stable")
        bounds = np.concatenate(([0], np.cumsum(np.bincount(codes, minlength=len(keys)))))
        return {key: self.take(order[bounds[c]:bounds[c + 1]]) for key, c in keys.items()}


def _comm_records(paths, warn: Callable[[str], None], since: str | None, until: str | None) -> list[dict]:
    seen, out = set(), []
    for path in columnar.store_files(paths):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", store.StoreWarning)
            try:
                found = list(store.iter_records(path, mentioning=b'"comm"'))
            except ValueError as error:
                raise UsageError(str(error)) from None
        for warning in caught:
            warn(str(warning.message))
        for record in found:
            if (is_comm(record) and record.get("run_id") not in seen and (not since or record.get("timestamp_utc", "") >= since)
                    and (not until or record.get("timestamp_utc", "") < until)):
                seen.add(record.get("run_id"))
                out.append(record)
    return out


def load_python(paths: Iterable[str | Path], warn: Callable[[str], None] | None = None, kind: str = "train") -> list[dict]:
    """The reader before runners.columnar: whole records, parsed in Python (runners.store). Kept
    as the reference the columnar reader is tested against (tests/test_reports.py)."""
    warn = warn or print_warning
    records = []
    for path in paths:
        if not Path(path).is_file():
            raise UsageError(f"{str(path)!r} is not a file")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", store.StoreWarning)
            try:
                found = list(store.iter_records(path))
            except ValueError as error:
                raise UsageError(str(error)) from None
            except OSError as error:
                raise UsageError(f"{str(path)!r} cannot be read ({error.strerror})") from None
            for record in found:
                config = record.get("config")
                if not (isinstance(config, dict) and {"framework", "model"} <= set(config)
                        and isinstance(record.get("status"), str) and isinstance(record.get("run_id"), str)):
                    raise UsageError(f"{str(path)!r} holds a JSON line that is not a dlbench record "
                                     "(needs run_id, status, config.framework, config.model)")
            records.extend(found)
        for warning in caught:
            warn(str(warning.message))
    return [r for r in records if is_comm(r) == (kind == "comm")]


# -- configuration keys --------------------------------------------------------------------------

# What makes two records "the same configuration" (compare, runtime and I/O pairs).
# Run-specific fields (seed, ports, data_dir path, num_batches, hostname...) are left out.
KEY_FIELDS = ("framework", "model", "batch_size", "image_size", "precision", "compile", "data", "strategy",
              "num_ps", "ps_placement", "workers", "device_kind", "runtime")
BASELINE_RUNTIME = runtimes.BARE  # runtime overhead is measured against running on the host


def runtime_of(record: dict) -> str:
    """The runtime a record ran under, in benchrun's names: the one asked for
    (provenance.requested_runtime, schema 1.4); for records of bench alone, or older
    ones, the one detected inside, with `none` read as the bare host."""
    provenance = record["provenance"]
    detected = provenance["container_runtime"]
    return provenance.get("requested_runtime") or (BASELINE_RUNTIME if detected == "none" else detected)


def compile_of(record: dict) -> str:
    """The compilation axis: the torch.compile mode, `xla` (TensorFlow --xla), else `none`
    (torch eager; TensorFlow's plain tf.function, its only other mode)."""
    config = record["config"]
    return config.get("compile") or ("xla" if config.get("xla") else "none")


def device_kind(record: dict) -> str:
    framework = record["provenance"].get("framework") or {}
    return framework.get("device_kind") or record["config"]["device"]


_KEYS: dict[tuple, tuple] = {}  # (id(config), id(world), id(provenance)) -> (the three, key, {fields: tuple})


def key_of(record: dict) -> dict:
    """The record's configuration (KEY_FIELDS). Remembered per (config, world, provenance) objects,
    which runners.columnar shares between records: a report asks this of every record many times.
    The returned dict is shared: read it, do not change it."""
    return _key_entry(record)[1]


def _key_entry(record: dict) -> tuple:
    parts = (record["config"], record["world"], record["provenance"])
    ident = tuple(map(id, parts))
    entry = _KEYS.get(ident)
    if entry is None:  # an entry holds its parts alive, so equal ids there mean the same objects
        if len(_KEYS) > 100_000:  # records not sharing these objects (the Python reader): bounded
            _KEYS.clear()
        entry = _KEYS[ident] = (parts, _key(record), {})
    return entry


def _key(record: dict) -> dict:
    config = record["config"]
    return {
        **{name: config[name] for name in ("framework", "model", "batch_size", "image_size", "precision",
                                           "data", "strategy", "num_ps", "ps_placement")},
        "compile": compile_of(record),
        "workers": record["world"]["workers"],
        "device_kind": device_kind(record),
        "runtime": runtime_of(record),
    }


def key_tuple(record: dict, fields: Iterable[str] = KEY_FIELDS) -> tuple:
    _, key, tuples = _key_entry(record)
    fields = tuple(fields)
    found = tuples.get(fields)
    if found is None:
        found = tuples[fields] = tuple(key[name] for name in fields)
    return found


# --where: key fields (and status, hostname) as SQL over a record `r` of runners.columnar, equal to
# key_of's values (tests/test_reports.py checks that on varied records), so filters run in DuckDB.
WHERE_FIELDS = {
    **{name: f"r.config.{name}" for name in ("framework", "model", "batch_size", "image_size", "precision", "data",
                                             "strategy", "num_ps", "ps_placement")},
    "compile": "coalesce(nullif(r.config.compile, ''), CASE WHEN r.config.xla THEN 'xla' ELSE 'none' END)",
    "workers": "r.world.workers",
    "device_kind": "coalesce(nullif(r.provenance.framework.device_kind, ''), r.config.device)",
    "runtime": "coalesce(nullif(r.provenance.requested_runtime, ''), CASE WHEN r.provenance.container_runtime = 'none' "
               f"THEN '{BASELINE_RUNTIME}' ELSE r.provenance.container_runtime END)",
    "status": "r.status",
    "hostname": "r.provenance.hostname",
}


def conditions(where: Iterable[str]) -> list[tuple[str, list]]:
    """--where FIELD=VALUE[,VALUE...] (repeatable: all must hold; commas: any value) as SQL for columnar.scan."""
    out = []
    for text in where:
        name, sep, values = text.partition("=")
        name, values = name.strip(), [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name or not values:
            raise UsageError(f"--where expects FIELD=VALUE[,VALUE...], got {text!r}")
        if name not in WHERE_FIELDS:
            raise UsageError(f"--where: unknown field {name!r} (choices: {', '.join(WHERE_FIELDS)})")
        out.append((f"CAST({WHERE_FIELDS[name]} AS VARCHAR) IN ({', '.join('?' * len(values))})", values))
    return out


def describe(key: dict, fields: Iterable[str] | None = None) -> str:
    fields = list(key) if fields is None else list(fields)
    return ", ".join(f"{name}={key[name]}" for name in fields)


def ids(records: Iterable[dict]) -> str:
    if isinstance(records, Records):
        return " ".join(records.table.prefixes[records.index].tolist())
    return " ".join(record["run_id"][:ID_PREFIX] for record in records)


# -- aggregates ----------------------------------------------------------------------------------


@dataclass
class Summary:
    """One metric over the records of one configuration: the host side's one statistics type
    (report, compare, compare-runtimes); its numbers come from benchmarks.stats."""

    values: list[float]
    records: list[dict]
    ci: float | None  # 95% half-width
    method: str  # how `ci` was obtained

    @property
    def stats(self) -> Stats:
        """The values' statistics: the same Stats type bench uses for steps."""
        return Stats.of(self.values)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return self.stats.mean

    @property
    def ids(self) -> str:
        return ids(self.records)

    def text(self, scale: float = 1.0, digits: int = 2) -> str:
        ci = "n/a" if self.ci is None else f"{self.ci / scale:.{digits}f}"
        return f"{self.mean / scale:.{digits}f} ± {ci}"


def ok(records: Iterable[dict]) -> list[dict]:
    if isinstance(records, Records):
        return records.take(records.table.ok[records.index])
    return [r for r in records if r["status"] == "ok" and r.get("throughput")]


def with_status(records: Iterable[dict], status: str) -> list[dict]:
    if isinstance(records, Records):
        return records.take(records.column("status") == status)
    return [r for r in records if r["status"] == status]


def field_values(records: Iterable[dict], section: str, name: str) -> list:
    """record[section][name] of each record (the section must be there)."""
    if isinstance(records, Records):
        return records.values(f"{section}.{name}")
    return [r[section][name] for r in records]


def having(records: Iterable[dict], section: str) -> list[dict]:
    """The records whose `section` is not null."""
    if isinstance(records, Records):
        return records.take(records.column(f"has {section}"))
    return [r for r in records if r.get(section) is not None]


def lacking(records: Iterable[dict], section: str) -> list[dict]:
    """The records whose `section` is null (the complement of `having`)."""
    if isinstance(records, Records):
        return records.take(~records.column(f"has {section}"))
    return [r for r in records if r.get(section) is None]


def throughput(records: Iterable[dict]) -> Summary | None:
    """images/sec over records: with >= 2 records a t-interval over them; with one, the
    record's own interval (over its repeats, or the delta method on its steps)."""
    good = ok(records)
    if not good:
        return None
    values = field_values(good, "throughput", "images_per_sec")
    if len(values) >= 2:
        return Summary(values, good, t_halfwidth(values), "t-interval over records")
    own = good[0]["throughput"]
    return Summary(values, good, own["ci95_halfwidth"], f"one record: {own['ci_method'] or 'no interval'}")


def memory(records: Iterable[dict], name: str) -> Summary | None:
    """A memory peak over the ok records that have it (null = does not apply: left out)."""
    return metric(records, "memory", name)


def metric(records: Iterable[dict], section: str, name: str) -> Summary | None:
    """`record[section][name]` over the ok records that have it (null = does not apply or not
    measured: left out, never read as 0); a t-interval with n >= 2."""
    good = ok(records)
    if isinstance(good, Records) and f"{section}.{name}" in good.table.data:
        good = good.take(good.present(f"{section}.{name}"))
    else:
        good = [r for r in good if (r.get(section) or {}).get(name) is not None]
    if not good:
        return None
    values = [float(value) for value in field_values(good, section, name)]
    if len(values) >= 2:
        return Summary(values, good, t_halfwidth(values), "t-interval over records")
    return Summary(values, good, None, "one record")


def group(records: Iterable[dict], fields: Iterable[str] = KEY_FIELDS) -> dict[tuple, list[dict]]:
    """Records by their values of key `fields` (sorted by those; store order within)."""
    fields = tuple(fields)
    if isinstance(records, Records):
        groups = records.group(fields)
    else:
        groups = defaultdict(list)
        for record in records:
            groups[key_tuple(record, fields)].append(record)
    return dict(sorted(groups.items(), key=lambda item: tuple(map(str, item[0]))))


def keys(records: Iterable[dict]) -> list[dict]:
    """The distinct configuration keys (key_of) among the records."""
    return [dict(zip(KEY_FIELDS, key)) for key in group(records)]


def without(*names: str) -> tuple:
    return tuple(name for name in KEY_FIELDS if name not in names)


def varying(keys: Iterable[dict], exclude: Iterable[str] = ()) -> list[str]:
    """Key fields that take more than one value among `keys` (for short legend labels)."""
    keys = list(keys)
    return [name for name in KEY_FIELDS if name not in exclude and len({k[name] for k in keys}) > 1]


# -- the report's sections as data ---------------------------------------------------------------


def environment(records: list[dict]) -> list[tuple[str, str]]:
    # every value below depends on a record's provenance, world, config and status only: count
    # records per distinct (those objects, status) once, then weigh (columnar shares the objects)
    weights = _weights(records)

    def values(get) -> str:
        counts: dict[str, int] = defaultdict(int)
        for record, weight in weights:
            for value in get(record):
                if value not in (None, ""):
                    counts[str(value)] += weight
        return "; ".join(f"{value} ({count})" for value, count in sorted(counts.items())) or "none"

    def fw(record, *names):
        framework = record["provenance"].get("framework")
        return [" ".join(str(framework[n]) for n in names if framework.get(n))] if framework else []

    gpu = lambda r: [f[0] for f in [fw(r, "device_name")] if f and device_kind(r) == "gpu"]  # noqa: E731
    return [
        ("records", str(len(records))),
        ("status", values(lambda r: [r["status"]])),
        ("hosts", values(lambda r: sorted({r["provenance"]["hostname"], *r["world"]["hosts"]}))),
        ("CPU", values(lambda r: [f"{r['provenance']['cpu_model']} x{r['provenance']['cpu_count']}"])),
        ("GPU", values(gpu)),
        ("frameworks", values(lambda r: fw(r, "name", "version"))),
        ("CUDA / cuDNN", values(lambda r: [f"CUDA {f['cuda_version']} cuDNN {f['cudnn_version']}" for f in
                                           [r["provenance"].get("framework")] if f and device_kind(r) == "gpu"])),
        ("runtimes (asked for)", values(lambda r: [runtime_of(r)])),
        ("container runtimes (detected inside)", values(lambda r: [r["provenance"]["container_runtime"]])),
        ("images", values(lambda r: [r["provenance"]["image"] or "(no image)"])),
        ("dlbench versions", values(lambda r: [r["provenance"]["dlbench_version"]])),
        ("Python", values(lambda r: [r["provenance"]["python"]])),
        ("launchers", values(lambda r: [r["world"]["launcher"]])),
        ("first / last run", f"{min(stamps)} / {max(stamps)}" if (stamps := _timestamps(records)) else "none"),
    ]


def _weights(records: list[dict]) -> list[tuple[dict, int]]:
    """(a record, how many) per distinct (provenance, world, config, status) among the records."""
    if isinstance(records, Records):
        status = records.column("status")
        out = []
        for value in set(status.tolist()):
            chosen = records.take(status == value)
            _, first, counts = np.unique(records.table.atom[chosen.index], return_index=True, return_counts=True)
            out.extend(zip((chosen[i] for i in first.tolist()), counts.tolist()))
        return out
    weights: dict[tuple, list] = {}
    for record in records:
        ident = (id(record["provenance"]), id(record["world"]), id(record["config"]), record["status"])
        entry = weights.get(ident)
        if entry is None:
            weights[ident] = [record, 1]
        else:
            entry[1] += 1
    return [(record, weight) for record, weight in weights.values()]


def _timestamps(records: list[dict]) -> list[str]:
    return records.values("timestamp_utc") if isinstance(records, Records) else [r["timestamp_utc"] for r in records]


@dataclass
class ScalingPoint:
    workers: int
    summary: Summary
    key: dict  # the configuration used at this worker count (best over num_ps / placement)
    efficiency: float | None  # E(N) = X(N) / (N X(1)); None without a 1-worker baseline


@dataclass
class ScalingLine:
    family: dict  # everything but workers, strategy, num_ps, ps_placement
    strategy: str
    points: list[ScalingPoint] = field(default_factory=list)
    baseline: Summary | None = None


SCALING_FAMILY = without("workers", "strategy", "num_ps", "ps_placement")


def best(groups: dict[tuple, list[dict]]) -> tuple[tuple, Summary] | None:
    scored = [(k, throughput(rs)) for k, rs in groups.items()]
    scored = [(k, s) for k, s in scored if s is not None]
    return max(scored, key=lambda item: item[1].mean) if scored else None


def scaling(records: list[dict]) -> list[ScalingLine]:
    """Per family and strategy: total images/sec vs workers, and weak-scaling efficiency.

    At each worker count the best configuration (num_ps, ps_placement) of that strategy is
    used; X(1) is the best 1-worker configuration of the same family and strategy.
    """
    lines = []
    fields = SCALING_FAMILY + ("strategy",)
    for family_key, members in group(ok(records), fields).items():
        family = dict(zip(fields, family_key))
        strategy = family.pop("strategy")
        by_workers: dict[int, dict[tuple, list[dict]]] = defaultdict(dict)
        for key, rs in group(members).items():
            by_workers[dict(zip(KEY_FIELDS, key))["workers"]][key] = rs
        line = ScalingLine(family, strategy)
        for workers in sorted(by_workers):
            chosen = best(by_workers[workers])
            if chosen is None:
                continue
            key, summary = chosen
            if workers == 1:
                line.baseline = summary
            line.points.append(ScalingPoint(workers, summary, dict(zip(KEY_FIELDS, key)), None))
        for point in line.points:
            if line.baseline is not None:
                point.efficiency = point.summary.mean / (point.workers * line.baseline.mean)
        lines.append(line)
    return lines


TABLE1_FAMILY = without("workers", "strategy", "num_ps", "ps_placement", "batch_size", "data")


def best_per_workers(records: list[dict]) -> list[tuple[dict, list[tuple[int, str, dict, Summary]]]]:
    """Seed 000's Table 1: per family, the configuration reaching peak images/sec at each
    (worker count, data) among all strategies, PS counts, placements and batch sizes."""
    out = []
    for family_key, members in group(ok(records), TABLE1_FAMILY).items():
        family = dict(zip(TABLE1_FAMILY, family_key))
        cells: dict[tuple[int, str], dict[tuple, list[dict]]] = defaultdict(dict)
        for key, rs in group(members).items():
            k = dict(zip(KEY_FIELDS, key))
            cells[(k["workers"], k["data"])][key] = rs
        rows = []
        for (workers, data), groups in sorted(cells.items()):
            key, summary = best(groups)
            rows.append((workers, data, dict(zip(KEY_FIELDS, key)), summary))
        out.append((family, rows))
    return out


@dataclass
class Pair:
    key: dict
    left: Summary | None
    right: Summary | None


def io_pairs(records: list[dict]) -> tuple[list[Pair], list[tuple[dict, str, list[dict]]]]:
    """Synthetic/real twins (same key but data). Returns (pairs, unmatched) where unmatched
    lists (key, which side exists, records)."""
    fields = without("data")
    pairs, unmatched = [], []
    for key, members in group(ok(records), fields).items():
        k = dict(zip(fields, key))
        by_data = group(members, ("data",))
        synthetic, real = by_data.get(("synthetic",), []), by_data.get(("real",), [])
        if synthetic and real:
            pairs.append(Pair(k, throughput(synthetic), throughput(real)))
        else:
            unmatched.append((k, "synthetic only (no real-data twin)" if synthetic else "real only (no synthetic twin)",
                              members))
    return pairs, unmatched


def io_overhead(pair: Pair) -> float:
    """(synthetic - real) / synthetic, as in seed 000."""
    return (pair.left.mean - pair.right.mean) / pair.left.mean


def welch_p(a: Summary, b: Summary) -> float | None:
    if a.n < 2 or b.n < 2:
        return None
    from scipy.stats import ttest_ind

    p = float(ttest_ind(a.values, b.values, equal_var=False).pvalue)
    return None if math.isnan(p) else p


@dataclass
class RuntimeRow:
    runtime: str
    summary: Summary
    overhead: float | None  # (X_local - X_runtime) / X_local; None without a `local` twin
    p_value: float | None  # Welch's t-test against `local`; None when a side has < 2 records


def runtime_groups(records: list[dict]) -> tuple[list[tuple[dict, list[RuntimeRow]]], list[tuple[dict, str, list[dict]]]]:
    """Same configuration under different runtimes (runtime_of; compare-runtimes' records).

    Returns (compared, unmatched): unmatched are configurations seen under one runtime only
    (listed only when the store has more than one runtime) or without a `local` baseline."""
    fields = without("runtime")
    several = len(group(records, ("runtime",))) > 1
    compared, unmatched = [], []
    for key, members in group(ok(records), fields).items():
        k = dict(zip(fields, key))
        by_runtime = {runtime: rs for (runtime,), rs in group(members, ("runtime",)).items()}
        if len(by_runtime) < 2:
            if several:
                unmatched.append((k, f"only under {next(iter(by_runtime))}", members))
            continue
        base = throughput(by_runtime[BASELINE_RUNTIME]) if BASELINE_RUNTIME in by_runtime else None
        if base is None:
            unmatched.append((k, f"no `{BASELINE_RUNTIME}` (bare host) records: overhead not computed", members))
        rows = []
        for runtime in sorted(by_runtime, key=lambda name: (name != BASELINE_RUNTIME, name)):
            summary = throughput(by_runtime[runtime])
            overhead = (base.mean - summary.mean) / base.mean if base is not None else None
            p_value = welch_p(base, summary) if base is not None and runtime != BASELINE_RUNTIME else None
            rows.append(RuntimeRow(runtime, summary, overhead, p_value))
        compared.append((k, rows))
    return compared, unmatched


def single_record_groups(records: list[dict]) -> list[tuple[dict, dict]]:
    """Configurations measured by one ok record: their ± is that run's own interval, no
    run-to-run spread."""
    return [(dict(zip(KEY_FIELDS, key)), rs[0]) for key, rs in group(ok(records)).items() if len(rs) == 1]


def max_batch_answers(records: Iterable[dict]) -> list[dict]:
    """The final probe record of each --find-max-batch search (batch_search.final), by search."""
    if isinstance(records, Records):
        return records.take(records.present("batch_search.final") & records.column("batch_search.final").astype(bool))
    return [r for r in records if (r.get("batch_search") or {}).get("final")]


def failures(records: list[dict]) -> list[dict]:
    if isinstance(records, Records):
        return records.take(records.column("status") != "ok")
    return [r for r in records if r["status"] != "ok"]


# -- why it does not scale: the lost time per step, split (docs/reports.md) -------------------------

LOSS_PARTS = ("exposed_communication", "input_wait", "straggler_wait", "compute", "idle")
LOSS_LABELS = {"exposed_communication": "exposed communication", "input_wait": "input wait",
               "straggler_wait": "straggler wait", "compute": "compute slowdown", "idle": "idle (other)"}
LOSS_TOLERANCE = 0.05  # of T(N): how far the parts' sum may miss the measured loss and still "add up"
GRADIENT_BYTES_PER_PARAMETER = 4  # float32 gradients (autocast keeps master gradients in float32)


@dataclass
class Predicted:
    """One step's exchange of the model's gradients (all-reduce, or PS push/pull) as the comm
    microbenchmark predicts it."""

    seconds: float
    nbytes: int
    busbw_gbps: float
    how: str  # "gradient buckets", "all-reduce busbw at SIZE", or "pull+push of every variable"
    run: str  # the comm record's run_id prefix


@dataclass
class ScalingLoss:
    key: dict  # the N-worker configuration
    workers: int
    t_n: float  # mean step time at N (timed loop), s
    t_1: float  # the same at 1 worker
    parts: dict[str, float | None]  # LOSS_PARTS -> s per step; None where not measurable
    traced: bool  # both sides have usable traces (else only input wait and the remainder)
    predicted: Predicted | None
    overlap_fraction: float | None  # communication hidden under compute, at N
    stretch: tuple[float | None, float | None]  # traced step / timed step at N and at 1 (profiler overhead)
    runs: str
    baseline_runs: str

    @property
    def loss(self) -> float:
        return self.t_n - self.t_1

    @property
    def explained(self) -> float:
        return sum(v for v in self.parts.values() if v is not None)

    @property
    def residual(self) -> float:
        """Measured loss minus the sum of the parts: what the split does not account for."""
        return self.loss - self.explained

    @property
    def adds_up(self) -> bool:
        return abs(self.residual) <= LOSS_TOLERANCE * self.t_n


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _mean_or_none(values: list[float | None]) -> float | None:
    """The mean, or None where a part does not apply (straggler wait of asynchronous strategies)."""
    return None if any(v is None for v in values) else _mean(values)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def traced_ranks(record: dict) -> list[dict]:
    """The per-rank trace summaries of a record that has them for every training rank (else [])."""
    ranks = ((record.get("trace") or {}).get("ranks")) or []
    usable = [r for r in ranks if r and r.get("steps")]
    return usable if usable and len(usable) == len(ranks) else []


def trace_parts(record: dict) -> dict | None:
    """Per-step parts from a record's traces, scaled to the timed step.

    Synchronous strategies: per profiled step, the slowest rank (most compute) is the one the
    others wait for, so the step is its step: straggler wait = its compute - the median rank's
    compute, compute = the median rank's, exposed communication and idle = its own (it waits
    least for the others, so its exposed communication is the transfer itself). These add up to
    its step minus its traced input fetch. Asynchronous ones (PS): no worker waits for another
    and the timed step is every worker's mean, so each part is the mean over workers of their
    mean step, and straggler wait does not apply (None). The profiler stretches traced steps, so
    every part is scaled by timed step / traced step (`stretch` = the inverse, in the report)."""
    ranks = traced_ranks(record)
    if not ranks:
        return None
    if strategies.get(record["config"]["strategy"]).synchronous:
        per_step = []
        for index in range(min(len(r["steps"]) for r in ranks)):
            steps = [r["steps"][index] for r in ranks]
            computes = [s["compute_s"] for s in steps]
            slowest = max(steps, key=lambda s: s["compute_s"])
            per_step.append({
                "step": slowest["step_s"],
                "straggler_wait": slowest["compute_s"] - _median(computes),
                "exposed_communication": slowest["exposed_communication_s"],
                "compute": _median(computes),
                "idle": slowest["idle_s"],
            })
    else:
        per_step = [{"step": r["mean"]["step_s"], "exposed_communication": r["mean"]["exposed_communication_s"],
                     "compute": r["mean"]["compute_s"], "idle": r["mean"]["idle_s"]} for r in ranks]
    traced_step = _mean([p["step"] for p in per_step])
    scale = record["step_time_s"]["mean"] / traced_step
    parts = {name: scale * _mean([p[name] for p in per_step]) for name in per_step[0] if name != "step"}
    parts.setdefault("straggler_wait", None)
    parts["stretch"] = 1 / scale
    fractions = [r["overlap_fraction"] for r in ranks if r.get("overlap_fraction") is not None]
    parts["overlap_fraction"] = _mean(fractions) if fractions else None
    return parts


def gradient_bytes(record: dict) -> int | None:
    parameters = (record.get("model") or {}).get("parameters")
    return parameters * GRADIENT_BYTES_PER_PARAMETER if parameters else None


def predicted_transfer(record: dict, comm_records: list[dict]) -> Predicted | None:
    """One step's exchange at this world size from the latest `bench comm` record of the same framework,
    device kind and backend (the one the training strategy uses), at as many ranks as it has workers.
    All-reduce: the `gradients` row when it sent exactly the model's gradient bytes, else the
    all-reduce row nearest in size (at or above the gradient bytes) at its busbw. Parameter
    servers: the `ps_step` row of the same model, image size, PS count and placement."""
    from benchmarks.comm.cli import default_backend
    from benchmarks.comm.metrics import bus_factor, format_size

    cfg = record["config"]
    strategy = strategies.get(cfg["strategy"])
    nbytes = gradient_bytes(record)
    workers = record["world"]["workers"]
    kind = device_kind(record)
    backend = default_backend(cfg["framework"], cfg["strategy"], kind, lambda: kind == "gpu")
    matching = [c for c in comm_records if c["status"] == "ok" and c.get("correct")
                and c["config"]["framework"] == cfg["framework"] and device_kind(c) == kind]
    if nbytes is None:
        return None
    same_ps = lambda c: all(c["config"].get(f) == cfg[f] for f in ("model", "image_size", "num_ps", "ps_placement"))  # noqa: E731
    for comm in sorted(matching, key=lambda c: c["timestamp_utc"], reverse=True):
        rows = [row for row in comm["results"] if row["backend"] == backend and row["ranks"] == workers]
        run = comm["run_id"][:ID_PREFIX]
        if strategy.uses_ps:
            exact = [row for row in rows if row["op"] == strategy.exchange_op and same_ps(comm)]
            if exact:
                row = exact[0]
                return Predicted(row["time_s"], row["bytes"], row["busbw_gbps"], "pull+push of every variable", run)
            continue
        exact = [row for row in rows if row["op"] == strategy.exchange_op and row["bytes"] == nbytes
                 and comm["config"]["model"] == cfg["model"]]
        if exact:
            row = exact[0]
            return Predicted(row["time_s"], row["bytes"], row["busbw_gbps"], "gradient buckets", run)
        sized = sorted((row for row in rows if row["op"] == "allreduce" and row["busbw_gbps"] > 0), key=lambda r: r["bytes"])
        if sized:
            row = next((r for r in sized if r["bytes"] >= nbytes), sized[-1])
            algbw = row["busbw_gbps"] / bus_factor("allreduce", workers) * 1e9
            return Predicted(nbytes / algbw, nbytes, row["busbw_gbps"], f"all-reduce busbw at {format_size(row['bytes'])}", run)
    return None


def _twin(key: dict, candidates: dict[tuple, list[dict]]) -> list[dict]:
    """The 1-worker records of the same configuration (same strategy first, else strategy none)."""
    for strategy in (key["strategy"], strategies.DEFAULT):
        twin = {**key, "workers": 1, "strategy": strategy}
        for other_key, rs in candidates.items():
            other = dict(zip(KEY_FIELDS, other_key))
            if all(other[f] == twin[f] for f in KEY_FIELDS if f not in ("num_ps", "ps_placement")):
                return rs
    return []


def scaling_loss(records: list[dict], comm_records: list[dict] = ()) -> list[ScalingLoss]:
    """For every multi-worker configuration with a 1-worker twin: T(N) - T(1) per step, split."""
    groups = group(ok(records))
    out = []
    for key_values, members in groups.items():
        key = dict(zip(KEY_FIELDS, key_values))
        if key["workers"] < 2:
            continue
        twins = ok(_twin(key, groups))
        if not twins:
            continue
        t_n = _mean(field_values(members, "step_time_s", "mean"))
        t_1 = _mean(field_values(twins, "step_time_s", "mean"))
        input_wait = _mean(field_values(members, "input_wait_s", "mean")) - _mean(field_values(twins, "input_wait_s", "mean"))
        traced_n = [p for p in map(trace_parts, having(members, "trace")) if p]
        traced_1 = [p for p in map(trace_parts, having(twins, "trace")) if p]
        parts: dict[str, float | None] = {name: None for name in LOSS_PARTS}
        parts["input_wait"] = input_wait
        overlap = None
        if traced_n:
            at_n = {name: _mean_or_none([p[name] for p in traced_n])
                    for name in ("exposed_communication", "straggler_wait", "compute", "idle")}
            if traced_1:
                at_1 = {name: _mean([p[name] for p in traced_1]) for name in ("exposed_communication", "compute", "idle")}
            else:  # no trace at 1 worker: its whole step but the input wait counts as compute
                at_1 = {"exposed_communication": 0.0, "idle": 0.0,
                        "compute": t_1 - _mean(field_values(twins, "input_wait_s", "mean"))}
            parts.update(exposed_communication=at_n["exposed_communication"] - at_1["exposed_communication"],
                         straggler_wait=at_n["straggler_wait"], compute=at_n["compute"] - at_1["compute"],
                         idle=at_n["idle"] - at_1["idle"])
            overlaps = [p["overlap_fraction"] for p in traced_n if p["overlap_fraction"] is not None]
            overlap = _mean(overlaps) if overlaps else None
        stretch = tuple(_mean([p["stretch"] for p in side]) if side else None for side in (traced_n, traced_1))
        out.append(ScalingLoss(key, key["workers"], t_n, t_1, parts, bool(traced_n), predicted_transfer(members[0], comm_records),
                               overlap, stretch, ids(members), ids(twins)))
    return out


def verdict(loss: ScalingLoss) -> str:
    """One sentence: the largest share of the lost time, with the microbenchmark's view of it."""
    where = f"at {loss.workers} workers"
    measured = {name: value for name, value in loss.parts.items() if value is not None}
    if loss.loss <= 0:
        parts = ", ".join(f"{LOSS_LABELS[name]} {1e3 * value:+.1f} ms" for name, value in measured.items())
        return (f"{where} a step takes no longer than at 1 worker ({1e3 * loss.t_n:.1f} vs {1e3 * loss.t_1:.1f} ms): "
                f"nothing is lost (parts: {parts}).")
    if not loss.traced:
        return (f"{where} {1e3 * loss.loss:.1f} ms/step is lost; {100 * measured['input_wait'] / loss.loss:.0f}% of it is input wait "
                f"and the rest is not split (no --trace records on both sides).")
    name = max(measured, key=lambda n: measured[n])
    strategy = strategies.get(loss.key["strategy"])
    exchange = strategy.exchange
    label = f"{LOSS_LABELS[name]} ({exchange})" if name == "exposed_communication" else LOSS_LABELS[name]
    sentence = f"{where}, {100 * measured[name] / loss.loss:.0f}% of the lost {1e3 * loss.loss:.1f} ms/step is {label}"
    if name == "exposed_communication" and loss.predicted is not None:
        p = loss.predicted
        rate = f"{p.busbw_gbps:.2f} GB/s {'per worker' if strategy.uses_ps else 'busbw'}"
        sentence += (f"; predicted {exchange}: {p.nbytes / 2**20:.1f} MiB at {rate} in {1e3 * p.seconds:.1f} ms, "
                     f"{fmt_fraction(loss.overlap_fraction)} of the communication traced hidden under compute")
    elif loss.parts.get("exposed_communication") is not None and name != "exposed_communication":
        sentence += f"; exposed communication ({exchange}) is {100 * loss.parts['exposed_communication'] / loss.loss:.0f}%"
    return sentence + "."


def fmt_fraction(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


NETWORK_OPS = ("allreduce", "pingpong", "pull", "push")  # ops measured over message sizes


def network_series(comm_records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(op, label) -> rows by size, for all-reduce, ping-pong and PS pull/push (over the model's
    variable sizes), from the latest ok record of each (framework, backend, op, world size, PS
    count, device kind)."""
    latest: dict[tuple, tuple[str, list[dict]]] = {}
    for comm in sorted((c for c in comm_records if c["status"] == "ok"), key=lambda c: c["timestamp_utc"]):
        num_ps = comm["config"].get("num_ps", 0)
        for op in NETWORK_OPS:
            for backend in sorted({row["backend"] for row in comm["results"] if row["op"] == op}):
                rows = sorted((row for row in comm["results"] if row["op"] == op and row["backend"] == backend),
                              key=lambda row: row["bytes"])
                world = comm["world"]["workers"]
                servers = f" ps={num_ps}" if num_ps else ""
                label = (f"{op} {comm['config']['framework']}/{backend} n={world}{servers} {device_kind(comm)} "
                         f"({comm['run_id'][:ID_PREFIX]})")
                latest[(comm["config"]["framework"], backend, op, world, num_ps, device_kind(comm))] = (label, rows)
    return {(key[2], label): rows for key, (label, rows) in sorted(latest.items())}
