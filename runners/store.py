"""Read result stores: plain bench JSONL (`bench --output`) and sweep stores (envelopes).

A sweep store line is an envelope (docs/sweeps.md):

    {"sweep": {"config_hash", "plan", "attempt", "point", ...}, "record": <bench record> | null, "error": str | null}

A plain bench line is the record itself (docs/results.md). `iter_records`
yields bench records from either; `iter_entries` yields every line as an
envelope (plain records get `sweep: None`), failures without a record included.

Every line is written with one write + fsync (benchmarks.record.append_jsonl), so
only the last line can be incomplete (power loss, full disk): it is skipped with
a StoreWarning. An unreadable line before the last is corruption: ValueError.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path


class StoreWarning(UserWarning):
    """A store's incomplete last line was skipped (or cut off by `repair_tail`)."""


def is_envelope(obj: dict) -> bool:
    return isinstance(obj, dict) and "sweep" in obj and "record" in obj


def _lines(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # tail: after the last newline (b"" when the file ends cleanly)
    for number, raw in enumerate(complete, 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            if number == len(complete) and not tail:
                warnings.warn(f"{path}: line {number} is not valid JSON (torn write?): skipped", StoreWarning, stacklevel=3)
                return
            raise ValueError(f"{path}: line {number} is not valid JSON: {error}") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{path}: line {number} is not a JSON object")
        yield number, obj
    if tail.strip():
        warnings.warn(f"{path}: line {len(complete) + 1} is incomplete (torn write): skipped", StoreWarning, stacklevel=3)


def iter_entries(path: str | os.PathLike) -> Iterator[dict]:
    """Every line as an envelope {"sweep": dict | None, "record": dict | None, "error": str | None}."""
    for _, obj in _lines(path):
        if is_envelope(obj):
            yield {"sweep": obj["sweep"], "record": obj["record"], "error": obj.get("error")}
        else:
            yield {"sweep": None, "record": obj, "error": None}


def iter_records(path: str | os.PathLike) -> Iterator[dict]:
    """The bench records in a plain or sweep JSONL store, in file order (envelopes without a record skipped)."""
    for entry in iter_entries(path):
        if entry["record"] is not None:
            yield entry["record"]


def repair_tail(path: str | os.PathLike) -> bool:
    """Cut an incomplete last line off the store so the next append starts a fresh line.

    Returns True when something was cut. Only bytes after the last newline, or a
    last line that is not JSON, are removed; complete records are never touched.
    """
    path = Path(path)
    if not path.exists():
        return False
    data = path.read_bytes()
    if not data:
        return False
    keep = len(data)
    if not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
    else:
        start = data.rfind(b"\n", 0, len(data) - 1) + 1
        try:
            json.loads(data[start:])
        except (json.JSONDecodeError, UnicodeDecodeError):
            keep = start
    if keep == len(data):
        return False
    warnings.warn(f"{path}: cut an incomplete last line ({len(data) - keep} bytes)", StoreWarning, stacklevel=2)
    with open(path, "r+b") as f:
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return True
