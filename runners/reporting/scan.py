"""Scan result stores with DuckDB: the JSONL stays the write format, reading scales
(docs/reports.md, "Reading"): only the fields asked for (a projection built from the record's
JSON Schema), de-duplicated by run_id and filtered out of core.

Store semantics are runners.store's, exactly (its shared lock, the torn last line, corrupt lines
named, envelopes without a record skipped). A field whose value is not of the schema's type is
refused the same way, naming the line and the field (DuckDB would read it as null, or give up on
the store).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

from benchmarks.core.errors import UsageError

from .. import store

SCHEMA = Path(__file__).resolve().parents[2] / "benchmarks" / "schema" / "result-1.json"
# read by every scan: its record checks, de-duplication and filters
CHECKED = ("run_id", "status", "timestamp_utc", "kind", "config.framework", "config.model")
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


def flat_fields(kind: str) -> list[tuple[str, str]] | None:
    """(field, type) of a STRUCT type `columns` gave whose fields are all scalars, else None."""
    if not (kind.startswith("STRUCT(") and kind.endswith(")")):
        return None
    fields = [field.split('" ', 1) for field in kind[7:-1].split(", ")]
    if not all(len(field) == 2 and field[1] in SCALARS.values() for field in fields):
        return None
    return [(name[1:], kind) for name, kind in fields]


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


def _load_file(con, index: int, path: Path, paths: list[str], select: list[str], where: list[tuple[str, list]],
               warn: Callable[[str], None], tmp: str) -> None:
    """One store into the `rows` table, checked as runners.store reads it: its torn last line
    dropped with store.torn_tail's warning; any other unreadable line an error."""
    import duckdb

    cols = columns(paths)
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
              FROM read_json(?, format='newline_delimited', columns={_spec(cols)}, ignore_errors=@IGNORE@,
                             maximum_object_size={MAX_LINE})) AS r"""
    params = [p for _, ps in where for p in ps]
    try:  # strictly first: a value DuckDB cannot take as the schema's type fails here, not as null
        con.execute(insert.replace("@IGNORE@", "false"), params + [str(path)])
        return
    except duckdb.InvalidInputException:
        con.execute("DELETE FROM rows WHERE file = ?", [index])
        check_types(path, paths)  # names the line and field, if that is why
    insert = insert.replace("@IGNORE@", "true")  # a torn last line, or an unreadable one (named below)
    torn = store.torn_tail(path)
    try:
        con.execute(insert, params + [str(path)])
    except duckdb.InvalidInputException:
        if not torn:
            raise
        # the torn line itself is what DuckDB cannot take (longer than MAX_LINE): read what precedes it
        con.execute("DELETE FROM rows WHERE file = ?", [index])
        with tempfile.NamedTemporaryFile(suffix=".jsonl", dir=tmp) as sound:
            shutil.copyfile(path, sound.name)
            os.truncate(sound.name, torn[1])
            con.execute(insert, params + [sound.name])
        torn = (torn[0], None)
    if torn and torn[1] is not None:  # the last line of this file: skipped, whatever DuckDB made of it
        con.execute("DELETE FROM rows WHERE rowid = (SELECT max(rowid) FROM rows WHERE file = ?)", [index])
    bad, unlike = con.execute("SELECT count(*) FILTER (WHERE bad), count(*) FILTER (WHERE unlike) FROM rows "
                              "WHERE file = ?", [index]).fetchone()
    if bad:
        with warnings.catch_warnings():  # where and why, in runners.store's words (CorruptStore)
            warnings.simplefilter("ignore", store.StoreWarning)
            for _ in store.iter_entries(path):
                pass
    if bad or unlike:
        raise UsageError(f"{str(path)!r} holds a JSON line that is not a dlbench record "
                         "(needs run_id, status, config.framework, config.model)")
    if torn:
        warn(torn[0])


JSON_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "object": (dict,),
              "array": (list,)}


def _expected(node: dict, tree: dict, where: str) -> dict[str, tuple[str, dict]]:
    """dotted path -> (the schema's JSON type, its sub-tree) for every path of `tree` with one type."""
    try:
        node = _resolve(node)
    except ValueError:
        return {}
    out = {where: (node["type"], tree)} if where and node.get("type") in JSON_TYPES else {}
    if node.get("type") == "array":
        node = _resolve(node["items"]) if "items" in node else {}
    for name, sub in tree.items():
        if name in node.get("properties", {}):
            out.update(_expected(node["properties"][name], sub, f"{where}.{name}" if where else name))
    return out


def check_types(path: Path, paths: list[str]) -> None:
    """Refuse a store holding a record whose field (among those read) is not of the schema's type,
    in one line naming the line and the field, as runners.store refuses a line that is not JSON."""
    tree = _tree(p for p in paths if p not in EXTRA_TYPES)
    expected = _expected({"type": "object", "properties": _schema()["properties"]}, tree, "")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", store.StoreWarning)
        for number, record in store.iter_numbered_records(path):
            if record.get("kind") == "comm":  # shaped otherwise (benchmarks/comm/record.py), read whole elsewhere
                continue
            for field, value in _values(record, expected, ""):
                kind = expected[field][0]
                if value is not None and (isinstance(value, bool) and kind != "boolean"
                                          or not isinstance(value, JSON_TYPES[kind])):
                    shown = json.dumps(value)
                    raise UsageError(f"{path}: line {number}: {field} is {shown[:40]}{'...' if len(shown) > 40 else ''}, "
                                     f"not a JSON {kind} (the record schema's type)")


def _values(value, expected: dict, where: str):
    """(dotted path, value) of every path of `expected` found under `value`."""
    if not isinstance(value, dict):
        return
    for name, sub in value.items():
        field = f"{where}.{name}" if where else name
        if field in expected:
            yield field, sub
            if expected[field][1] and isinstance(sub, dict):
                yield from _values(sub, expected, field)
            elif expected[field][0] == "array" and isinstance(sub, list):
                for item in sub:
                    yield from _values(item, expected, field)


@contextmanager
def scan(paths: Iterable[str | Path], fields: Iterable[str], select: Iterable[str], *,
         since: str | None = None, until: str | None = None, where: Iterable[tuple[str, list]] = (),
         warn: Callable[[str], None]):
    """A DuckDB connection whose view `records` has one row per training record in the stores:
    the `select` expressions (SQL over `r`, the record holding only `fields`, dotted paths) as
    columns c0, c1, ...; in store order, de-duplicated by run_id (the first seen wins), with
    since <= timestamp_utc < until and every (SQL condition over `r`, parameters) of `where`.
    Its table `stores` (file, path, comm) says which stores hold `bench comm` records."""
    import duckdb

    files = store_files(paths)
    paths = [*CHECKED, *fields]
    cols = columns(paths)
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
                    with store.reading(path):  # DuckDB, torn_tail and the checks see one state of the file
                        _load_file(con, index, path, paths, select, where, warn, tmp)
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
            conditions, params = ["NOT envelope_only", "NOT comm", "chosen"], []
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
