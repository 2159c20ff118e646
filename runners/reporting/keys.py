"""What makes two records "the same configuration", written once.

Each key field is an expression over the record that renders both ways: as a value of
a record in Python (`of`) and as DuckDB SQL over the record `r` of runners.reporting.scan
(`sql`), so `--where` filters and the loader's grouping run in DuckDB and say what
key_of says. Run-specific fields (seed, ports, data_dir path, num_batches, hostname...)
are left out. Definitions: docs/reports.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from operator import itemgetter

from benchmarks.core.errors import UsageError

from .. import runtimes

ID_PREFIX = 8  # run_id characters shown in tables
BASELINE_RUNTIME = runtimes.BARE  # runtime overhead is measured against running on the host


@dataclass(frozen=True)
class Field:
    """A dotted record field (None where any part is missing or null)."""

    dotted: str

    def of(self, record):
        value = record
        for part in self.dotted.split("."):
            value = value.get(part) if value is not None else None
        return value

    def sql(self) -> str:
        return "r." + ".".join(f'"{part}"' for part in self.dotted.split("."))


@dataclass(frozen=True)
class Either:
    """The first text unless it is null or empty, else the second."""

    first: Field
    then: object

    def of(self, record):
        return self.first.of(record) or self.then.of(record)

    def sql(self) -> str:
        return f"coalesce(nullif({self.first.sql()}, ''), {self.then.sql()})"


@dataclass(frozen=True)
class Flag:
    """One text where a boolean field is true, another where it is not."""

    flag: Field
    yes: str
    no: str

    def of(self, record):
        return self.yes if self.flag.of(record) else self.no

    def sql(self) -> str:
        return f"CASE WHEN {self.flag.sql()} THEN '{self.yes}' ELSE '{self.no}' END"


@dataclass(frozen=True)
class Renamed:
    """A text field with one value read as another."""

    field: Field
    old: str
    new: str

    def of(self, record):
        value = self.field.of(record)
        return self.new if value == self.old else value

    def sql(self) -> str:
        return f"CASE WHEN {self.field.sql()} = '{self.old}' THEN '{self.new}' ELSE {self.field.sql()} END"


def _config(name: str) -> Field:
    return Field(f"config.{name}")


# compile: the torch.compile mode, `xla` (TensorFlow --xla), else `none` (torch eager; TensorFlow's
# plain tf.function); device_kind: the framework's view, else the one asked for (a run that died
# before the framework loaded); runtime: the one benchrun was asked for, else (older records) the
# one detected inside, `none` read as the bare host
KEY = {
    **{name: _config(name) for name in ("framework", "model", "batch_size", "image_size", "precision")},
    "compile": Either(_config("compile"), Flag(_config("xla"), "xla", "none")),
    **{name: _config(name) for name in ("data", "strategy", "num_ps", "ps_placement")},
    "workers": Field("world.workers"),
    "device_kind": Either(Field("provenance.framework.device_kind"), _config("device")),
    "runtime": Either(Field("provenance.requested_runtime"),
                      Renamed(Field("provenance.container_runtime"), "none", BASELINE_RUNTIME)),
}
KEY_FIELDS = tuple(KEY)
# --where: the key fields, and status and hostname
WHERE_FIELDS = {name: expression.sql() for name, expression in
                {**KEY, "status": Field("status"), "hostname": Field("provenance.hostname")}.items()}


def key_values(record) -> tuple:
    """The record's KEY_FIELDS values. The loader computes them in DuckDB (`key` of its records);
    a record built elsewhere gets them here."""
    return getattr(record, "key", None) or tuple(expression.of(record) for expression in KEY.values())


def key_of(record) -> dict:
    return dict(zip(KEY_FIELDS, key_values(record)))


def picker(fields: Iterable[str]):
    """key values -> the values of `fields`, as a tuple."""
    at = [KEY_FIELDS.index(name) for name in fields]
    if len(at) == 1:
        return lambda values: (values[at[0]],)
    return itemgetter(*at) if at else (lambda values: ())


def key_tuple(record, fields: Iterable[str] = KEY_FIELDS) -> tuple:
    return picker(fields)(key_values(record))


def runtime_of(record) -> str:
    """The runtime a record ran under, in benchrun's names (KEY's rule)."""
    return KEY["runtime"].of(record)


def device_kind(record) -> str:
    return KEY["device_kind"].of(record)


def conditions(where: Iterable[str]) -> list[tuple[str, list]]:
    """--where FIELD=VALUE[,VALUE...] (repeatable: all must hold; commas: any value) as SQL for scan."""
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
    return ", ".join(f"{name}={key[name]}" for name in (key if fields is None else fields))


def ids(records: Iterable) -> str:
    return " ".join(record["run_id"][:ID_PREFIX] for record in records)


def without(*names: str) -> tuple:
    return tuple(name for name in KEY_FIELDS if name not in names)


def varying(keys: Iterable[dict], exclude: Iterable[str] = ()) -> list[str]:
    """Key fields that take more than one value among `keys` (for short legend labels)."""
    keys = list(keys)
    return [name for name in KEY_FIELDS if name not in exclude and len({k[name] for k in keys}) > 1]
