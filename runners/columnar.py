"""Read result stores through DuckDB: the JSONL stays the write format, reading scales.

`benchrun report`, `compare` and `export` need a few dozen of a record's fields,
not its per-step times. DuckDB parses the JSONL in C++ on every core, keeps only
those fields (a projection built from the record's JSON Schema), de-duplicates by
run_id and filters by time out of core (spilling to a temporary directory), and
hands back slim records: dicts shaped like the full record, holding only the
fields asked for. The tables are computed from them by the same Python code
(runners.reports, benchmarks.stats) as before, so the numbers are the same.

Store semantics are runners.store's, exactly: plain records and sweep envelopes
may be mixed; an envelope without a record is skipped; only a store's last line
may be torn (skipped with a warning, store.torn_tail); an unreadable line before
it is corruption (the error names the line, found by store.iter_entries).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

from benchmarks.errors import UsageError

from . import store

SCHEMA = Path(__file__).resolve().parent.parent / "benchmarks" / "schema" / "result-1.json"
EXTRA_TYPES = {"kind": "VARCHAR"}  # comm records (benchmarks.comm.record) share stores with training records
BATCH = 20_000  # rows fetched from DuckDB at a time (export --csv)
MAX_LINE = 32 << 20  # longest store line DuckDB reads (its buffers are a few times this)
MEMORY_LIMIT = os.environ.get("DLBENCH_DUCKDB_MEMORY", "512MB")  # beyond this DuckDB spills to disk

# -- the projection: dotted record paths -> a DuckDB STRUCT type, from the JSON Schema ----------


@cache
def _schema() -> dict:
    return json.loads(SCHEMA.read_text())


def _resolve(node: dict) -> dict:
    """Follow $ref and drop the null branch of `X | None`."""
    while True:
        if "$ref" in node:
            node = _schema()["$defs"][node["$ref"].rsplit("/", 1)[1]]
        elif "anyOf" in node:
            branches = [b for b in node["anyOf"] if b.get("type") != "null"]
            if len(branches) != 1:
                raise ValueError(f"no single type in {node}")
            node = branches[0]
        else:
            return node


SCALARS = {"string": "VARCHAR", "integer": "BIGINT", "number": "DOUBLE", "boolean": "BOOLEAN"}


def _tree(paths: Iterable[str]) -> dict:
    tree: dict = {}
    for path in paths:
        node = tree
        for part in path.split("."):
            node = node.setdefault(part, {})
    return tree


def _type(node: dict, tree: dict, where: str) -> str:
    """The DuckDB type of `node` holding the paths in `tree`; an empty tree at an object: all of it."""
    try:
        node = _resolve(node)
    except ValueError:
        if tree:
            raise
        return "JSON"  # several types (a union): kept as JSON text
    if node.get("type") == "array":
        return _type(node["items"], tree, where) + "[]"
    if not tree and node.get("type") == "object" and node.get("properties"):
        tree = {name: {} for name in node["properties"]}
    if tree:
        fields = []
        for name, sub in tree.items():
            if name not in node.get("properties", {}):
                raise ValueError(f"{where}.{name} is not in the record schema")
            fields.append(f'"{name}" {_type(node["properties"][name], sub, f"{where}.{name}")}')
        return f"STRUCT({', '.join(fields)})"
    return SCALARS.get(node.get("type"), "JSON")  # free-form values: JSON text


def columns(paths: Iterable[str]) -> dict[str, str]:
    """Top-level field -> DuckDB type holding just `paths` (dotted; through arrays too)."""
    root = _schema()
    return {name: EXTRA_TYPES[name] if name in EXTRA_TYPES else _type(root["properties"][name], sub, name)
            for name, sub in _tree(paths).items()}


# -- stores and filters ----------------------------------------------------------------------------


def store_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; a directory stands for every *.jsonl under it (sorted). Each is opened
    once here, so an unreadable one is named before any reading starts."""
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
            if not found:
                raise UsageError(f"{str(path)!r} is a directory without *.jsonl stores")
        elif path.is_file():
            found = [path]
        else:
            raise UsageError(f"{str(path)!r} is not a file or a directory")
        for file in found:
            try:
                open(file, "rb").close()
            except OSError as error:
                raise UsageError(f"{str(file)!r} cannot be read ({error.strerror})") from None
        files.extend(found)
    return files


def timestamp(text: str, flag: str) -> str:
    """--since/--until (ISO date or date-time, UTC unless it says otherwise) in the records'
    timestamp_utc form, so that string order is time order."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{flag} expects an ISO date or date-time like 2026-11-01 or 2026-11-01T12:00, got {text!r}") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment.isoformat(timespec="milliseconds")


# -- reading ---------------------------------------------------------------------------------------


def _fields(cols: dict[str, str]) -> str:
    return ", ".join(f'"{name}" {kind}' for name, kind in cols.items())


def _spec(cols: dict[str, str]) -> str:
    both = {"sweep": "STRUCT(attempt BIGINT)", "record": f"STRUCT({_fields(cols)})", **cols}
    return "{" + ", ".join(f"'{name}': '{kind}'" for name, kind in both.items()) + "}"


def _load_file(con, index: int, path: Path, cols: dict[str, str], select: list[str], where: list[tuple[str, list]],
               warn: Callable[[str], None], tmp: str) -> None:
    """One store into the `rows` table, checked as runners.store reads it: its torn last line
    dropped with store.torn_tail's warning; any other unreadable line an error."""
    import duckdb

    # `r` is the record, field by field: a sweep envelope's `record`, else the line itself (one CASE per
    # field: packing whole structs to pick one costs as much again as parsing the line)
    fields = ", ".join(f'CASE WHEN sweep IS NOT NULL THEN record."{name}" ELSE "{name}" END AS "{name}"' for name in cols)
    chosen = " AND ".join(f"({sql})" for sql, _ in where) or "true"
    insert = f"""
        INSERT INTO rows SELECT {index}, _bad, NOT _bad AND NOT _envelope_only AND (r.run_id IS NULL OR r.status IS NULL
               OR r.config.framework IS NULL OR r.config.model IS NULL), r.run_id, r.timestamp_utc,
               r.kind IS NOT DISTINCT FROM 'comm', _envelope_only, coalesce({chosen}, false), {", ".join(select)}
        FROM (SELECT sweep IS NULL AND record IS NULL AND run_id IS NULL AND status IS NULL AND config IS NULL AS _bad,
                     sweep IS NOT NULL AND record IS NULL AS _envelope_only, {fields}
              FROM read_json(?, format='newline_delimited', columns={_spec(cols)}, ignore_errors=true,
                             maximum_object_size={MAX_LINE})) AS r"""
    params = [p for _, ps in where for p in ps]
    torn = store.torn_tail(path)
    try:
        con.execute(insert, params + [str(path)])
    except duckdb.InvalidInputException:
        if not torn:
            raise
        # the torn line itself is what DuckDB cannot take (longer than MAX_LINE): read what precedes it
        con.execute("DELETE FROM rows WHERE file = ?", [index])
        with open(path, "rb") as source, tempfile.NamedTemporaryFile(suffix=".jsonl", dir=tmp) as sound:
            shutil.copyfileobj(io.BufferedReader(_Prefix(source, torn[1])), sound)
            sound.flush()
            con.execute(insert, params + [sound.name])
        torn = (torn[0], None)
    if torn and torn[1] is not None:  # the last line of this file: skipped, whatever DuckDB made of it
        con.execute("DELETE FROM rows WHERE rowid = (SELECT max(rowid) FROM rows WHERE file = ?)", [index])
    bad, unlike = con.execute("SELECT count(*) FILTER (WHERE bad), count(*) FILTER (WHERE unlike) FROM rows "
                              "WHERE file = ?", [index]).fetchone()
    if bad:
        import warnings

        try:  # where and why, in runners.store's words
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", store.StoreWarning)
                for _ in store.iter_entries(path):
                    pass
        except ValueError as error:
            raise UsageError(str(error)) from None
    if bad or unlike:
        raise UsageError(f"{str(path)!r} holds a JSON line that is not a dlbench record "
                         "(needs run_id, status, config.framework, config.model)")
    if torn:
        warn(torn[0])


class _Prefix(io.RawIOBase):
    """The first `size` bytes of a file."""

    def __init__(self, f, size: int):
        self.f, self.left = f, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        view = memoryview(buffer)[:self.left]
        n = self.f.readinto(view) if len(view) else 0
        self.left -= n
        return n


@contextmanager
def scan(paths: Iterable[str | Path], fields: Iterable[str], select: Iterable[str], *, kind: str = "train",
         since: str | None = None, until: str | None = None, where: Iterable[tuple[str, list]] = (),
         warn: Callable[[str], None]):
    """A DuckDB connection whose view `records` has one row per record of `kind` in the stores:
    the `select` expressions (SQL over `r`, the record holding only `fields`, dotted paths) as
    columns c0, c1, ...; in store order, de-duplicated by run_id (the first seen wins), with
    since <= timestamp_utc < until and every (SQL condition over `r`, parameters) of `where`.
    Its table `stores` (file, path, comm) says which stores hold `bench comm` records."""
    import duckdb

    files = store_files(paths)
    cols = columns(["run_id", "status", "timestamp_utc", "kind", "config.framework", "config.model", *fields])
    select, where = list(select), list(where)
    with tempfile.TemporaryDirectory(prefix="dlbench-scan-") as tmp:
        con = duckdb.connect(config={"memory_limit": MEMORY_LIMIT, "temp_directory": tmp,
                                     "preserve_insertion_order": True})
        try:
            con.execute("SET enable_progress_bar = false")
            empty = f"(SELECT NULL::STRUCT({_fields(cols)}) AS r)"
            types = [row[1] for row in con.execute(
                f"DESCRIBE SELECT {', '.join(f'{e} AS c{i}' for i, e in enumerate(select))} FROM {empty}").fetchall()]
            con.execute("CREATE TABLE rows (file INTEGER, bad BOOLEAN, unlike BOOLEAN, run_id VARCHAR, timestamp_utc VARCHAR, "
                        "comm BOOLEAN, envelope_only BOOLEAN, chosen BOOLEAN, "
                        + ", ".join(f"c{i} {kind}" for i, kind in enumerate(types)) + ")")
            for index, path in enumerate(files):
                try:
                    _load_file(con, index, path, cols, select, where, warn, tmp)
                except OSError as error:
                    raise UsageError(f"{str(path)!r} cannot be read ({error.strerror})") from None
                except duckdb.Error as error:  # one line naming the store
                    raise UsageError(f"{str(path)!r} cannot be read as a store: {str(error).splitlines()[0]}") from None
            # later copies of a run (the same record in two stores, or a store given twice) go
            con.execute("DELETE FROM rows WHERE rowid IN (SELECT rowid FROM rows WHERE NOT envelope_only QUALIFY "
                        "row_number() OVER (PARTITION BY run_id ORDER BY rowid) > 1)")
            # which stores hold records of the other kind (`bench comm` ones are read whole, in Python: only there)
            con.execute("CREATE TEMP TABLE stores (file INTEGER, path VARCHAR, comm BOOLEAN)")
            con.executemany("INSERT INTO stores VALUES (?, ?, false)", [[i, str(path)] for i, path in enumerate(files)])
            con.execute("UPDATE stores SET comm = true WHERE file IN (SELECT file FROM rows WHERE comm AND NOT envelope_only)")
            conditions, params = ["NOT envelope_only", "comm = ?", "chosen"], [kind == "comm"]
            if since:
                conditions.append("timestamp_utc >= ?")
                params.append(since)
            if until:
                conditions.append("timestamp_utc < ?")
                params.append(until)
            con.execute(f"DELETE FROM rows WHERE NOT ({' AND '.join(conditions)})", params)
            con.execute(f"CREATE VIEW records AS SELECT {', '.join(f'c{i}' for i in range(len(select)))} FROM rows")
            yield con
        finally:
            con.close()


class SlimRecord(Mapping):
    """A record (or one of its flat sections) holding only some fields, read like the record's dict
    (r["config"], r.get("trace")): slots instead of a dict, half the memory at a million records."""

    __slots__ = ()

    def __getitem__(self, key: str):
        try:
            return getattr(self, key)
        except (AttributeError, TypeError):
            raise KeyError(key) from None

    def get(self, key: str, default=None):
        return getattr(self, key, default)

    def __iter__(self):
        return iter(self.__slots__)

    def __len__(self) -> int:
        return len(self.__slots__)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


class Layout:
    """Where `_builder` put each part of a slim record among the selected columns c0, c1, ...:
    scalars by dotted path, flat and whole sections by name (a null flag, or the JSON text)."""

    def __init__(self):
        self.scalars: dict[str, int] = {}  # "status", "throughput.images_per_sec" -> column
        self.null_flags: dict[str, int] = {}  # flat section -> its "IS NULL" column
        self.texts: dict[str, int] = {}  # section kept as JSON text -> column
        self.shared: dict[str, int] = {}  # shared section (a STRUCT in `rows`, an id in `read`) -> column
        self.interned: list[int] = []  # short text with few distinct values


def _builder(cols: dict[str, str], share: set[str]) -> tuple[list[str], Layout, Callable[[tuple, dict], SlimRecord]]:
    """(SELECT expressions, where each part went, (row, shared values) -> slim record). Objects named
    in `share` come as ids into one parsed value per distinct value (see `read`); other flat objects
    as their fields plus a null flag (short text interned); anything else as JSON."""
    select, lines, layout = [], [], Layout()
    env = {"loads": json.loads, "intern": sys.intern, "text": _intern_or_none}
    unique = {"run_id", "timestamp_utc"}
    for name, kind in cols.items():
        at = len(select)
        if name in share:
            select.append(f'r."{name}"')
            layout.shared[name] = at
            lines.append(f'r.{name} = None if row[{at}] is None else shared["{name}"][row[{at}]]')
        elif kind.startswith("STRUCT(") and kind.endswith(")") and all(
                f.split('" ', 1)[1] in SCALARS.values() for f in kind[7:-1].split(", ")):  # flat: fields and a flag
            fields = [f.split('" ', 1) for f in kind[7:-1].split(", ")]
            select.append(f'r."{name}" IS NULL')
            layout.null_flags[name] = at
            select.extend(f'r."{name}"."{field[1:]}"' for field, _ in fields)
            layout.scalars.update({f"{name}.{field[1:]}": at + 1 + i for i, (field, _) in enumerate(fields)})
            env[f"Flat_{name}"] = type(f"Flat_{name}", (SlimRecord,), {"__slots__": tuple(f[1:] for f, _ in fields)})
            lines.append(f"if row[{at}]:\n        r.{name} = None\n    else:\n        r.{name} = o = Flat_{name}()")
            lines.extend(f"    o.{field[1:]} = " + (f"text(row[{at + 1 + i}])" if t == "VARCHAR" else f"row[{at + 1 + i}]")
                         for i, (field, t) in enumerate(fields))
            layout.interned.extend(at + 1 + i for i, (_, t) in enumerate(fields) if t == "VARCHAR")
        elif kind.startswith("STRUCT(") or kind.endswith("]") or kind == "JSON":
            select.append(f'to_json(r."{name}")')
            layout.texts[name] = at
            lines.append(f"r.{name} = None if row[{at}] is None else loads(row[{at}])")
        else:
            select.append(f'r."{name}"')
            layout.scalars[name] = at
            lines.append(f"r.{name} = row[{at}]" if name in unique or kind != "VARCHAR" else f"r.{name} = text(row[{at}])")
            if name not in unique and kind == "VARCHAR":
                layout.interned.append(at)
    env["Record"] = type("Record", (SlimRecord,), {"__slots__": tuple(cols)})
    source = "def build(row, shared):\n    r = Record()\n" + "".join(f"    {line}\n" for line in lines) + "    return r\n"
    exec(source, env)  # noqa: S102 - generated from the record schema's field names
    return select, layout, env["build"]


def _intern_or_none(value):
    return None if value is None else sys.intern(value)


class Rows:
    """The records `read` found, as columns; slim records are built from them only for the rows asked
    for (a report over a million records looks at a few thousand of them one by one)."""

    def __init__(self, arrays: list, build: Callable[[tuple, dict], SlimRecord], shared: dict):
        self.arrays, self._build, self._shared = arrays, build, shared

    def __len__(self) -> int:
        return len(self.arrays[0])

    def records(self, index) -> list[SlimRecord]:
        """The slim records at these row positions (a NumPy index array), in this order."""
        return [self._build(row, self._shared) for row in zip(*(array[index].tolist() for array in self.arrays))]


@dataclass
class Read:
    """What `read` found: its records, columns of them, and the stores that also hold `bench comm` records."""

    rows: Rows
    columns: dict  # name -> NumPy masked array, one value per record
    comm_stores: list[str]


def read(paths: Iterable[str | Path], fields: Iterable[str], share: Iterable[str] = (), *, values: Iterable[str] = (),
         present: Iterable[str] = (), **filters) -> Read:
    """The records of `scan` in store order, shaped like records but holding only `fields`, and as
    NumPy arrays (masked where null) the scalar fields named in `values` (dotted, among `fields`),
    for each section in `present` whether a record has it, and for each shared section the id of its
    value (-1: null), so that equal ids mean the same object. Top-level objects named in `share` are
    one object per distinct value, shared between records: a million records of a few hundred
    configurations fit in memory. The columns spare the caller a million Python objects and passes
    over them; the records it looks at one by one it gets from `Read.rows`."""
    import numpy as np

    fields, share = list(fields), set(share)
    cols = columns(["run_id", "status", "timestamp_utc", "kind", "config.framework", "config.model", *fields])
    select, layout, build = _builder(cols, share)
    with scan(paths, fields, select, **filters) as con:
        # each shared section's distinct values get ids (in DuckDB): only those cross into Python, as JSON
        shared, joins, out = {}, [], [f"rows.c{i}" for i in range(len(select))]
        for name, at in layout.shared.items():
            con.execute(f"CREATE TEMP TABLE shared_{name} AS SELECT value, to_json(value) AS json_text, "
                        f"(row_number() OVER (ORDER BY to_json(value))) - 1 AS id "
                        f"FROM (SELECT DISTINCT c{at} AS value FROM rows WHERE c{at} IS NOT NULL)")
            shared[name] = [json.loads(text) for text, in
                            con.execute(f"SELECT json_text FROM shared_{name} ORDER BY id").fetchall()]
            joins.append(f"LEFT JOIN shared_{name} ON rows.c{at} = shared_{name}.value")
            out[at] = f"shared_{name}.id"
        con.execute(f"CREATE TEMP TABLE slim AS SELECT {', '.join(f'{e} AS c{i}' for i, e in enumerate(out))} "
                    f"FROM rows {' '.join(joins)} ORDER BY rows.rowid")
        con.execute("DROP VIEW records; DROP TABLE rows")  # its memory, before Python's grows
        found = con.execute("SELECT * FROM slim").fetchnumpy()
        arrays = [np.ma.asarray(found.pop(f"c{i}")) for i in range(len(out))]
        for at in layout.interned:  # few distinct values (status, ci_method...): one string each
            arrays[at] = np.ma.MaskedArray(np.fromiter(map(_intern_or_none, arrays[at].tolist()), dtype=object,
                                                       count=len(arrays[at])), np.ma.getmaskarray(arrays[at]))
        comm_stores = [path for path, in con.execute("SELECT path FROM stores WHERE comm ORDER BY file").fetchall()]
    named = {path: arrays[layout.scalars[path]] for path in values}
    named.update({f"has {name}": ~np.ma.filled(arrays[layout.null_flags[name]], True) if name in layout.null_flags
                  else ~np.ma.getmaskarray(arrays[layout.texts[name]]) for name in present})
    named.update({f"id {name}": np.ma.filled(arrays[at], -1) for name, at in layout.shared.items()})
    return Read(Rows(arrays, build, shared), {name: np.ma.asarray(array) for name, array in named.items()}, comm_stores)
