"""Read result stores: plain bench JSONL (`bench --output`, docs/results.md) and sweep stores,
whose lines are envelopes {"sweep": {...}, "record": <bench record> | null, "error": ...} (docs/sweeps.md).

Every line is written with one write + fsync under the store's exclusive lock
(benchmarks.core.durable.append_jsonl), so only the last line can be incomplete (power loss, full
disk): it is skipped with a StoreWarning; an unreadable line before it is corruption
(CorruptStore). Readers never take another process's line half written for a torn one: they read
under the shared lock (`reading`) or up to a length taken under it (`_whole_length`).
"""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.core.errors import UsageError


class CorruptStore(UsageError):
    """A line that is not a JSON object, before the last: the user's file, named with its line (exit 2)."""


class StoreWarning(UserWarning):
    """A store's incomplete last line was skipped (or cut off by `repair_tail`)."""


def is_envelope(obj: dict) -> bool:
    return isinstance(obj, dict) and "sweep" in obj and "record" in obj


BLOCK = 1 << 24  # bytes read at a time


@contextmanager
def reading(path: str | os.PathLike):
    """The store opened for reading, under a shared lock: no append (benchmarks.core.durable.append_jsonl,
    which holds the exclusive one) is in progress while it is held, so what is read is whole lines
    only, but for the torn tail a killed writer left."""
    with open(path, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        yield f


def _whole_length(f) -> int:
    """The store's length at a moment no append was in progress (its shared lock, held for that moment
    only, so a slow reader holds up no writer). The lines before it stay as they are: appends come
    after it, and a writer cuts no more than a torn tail, which is read as torn whatever replaced it."""
    fcntl.flock(f, fcntl.LOCK_SH)
    try:
        return os.fstat(f.fileno()).st_size
    finally:
        fcntl.flock(f, fcntl.LOCK_UN)


def _lines(path: str | os.PathLike, mentioning: bytes | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, object) per line, streamed: memory stays a block and a line, whatever the store's size.
    With `mentioning`, complete lines without those bytes are passed over unparsed (and unchecked): a
    block without them at all is only counted, so finding the few `bench comm` lines is fast."""
    with open(path, "rb") as f:
        number, carry, left = 0, b"", _whole_length(f)
        while left and (block := f.read(min(BLOCK, left))):
            left -= len(block)
            data = carry + block if carry else block
            end = data.rfind(b"\n") + 1
            data, carry = data[:end], data[end:]
            if mentioning is not None and mentioning not in data:
                number += data.count(b"\n")
                continue
            start = 0
            while start < end:
                stop = data.index(b"\n", start) + 1
                raw, start = data[start:stop], stop
                number += 1
                if not raw.strip() or (mentioning is not None and mentioning not in raw):
                    continue
                try:
                    obj = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError) as error:
                    if start == end and not carry and not left:  # the last line, complete but not JSON
                        warnings.warn(f"{path}: line {number} is not valid JSON (torn write?): skipped", StoreWarning,
                                      stacklevel=3)
                        return
                    raise CorruptStore(f"{path}: line {number} is not valid JSON: {error}") from None
                if not isinstance(obj, dict):
                    raise CorruptStore(f"{path}: line {number} is not a JSON object")
                yield number, obj
        if carry.strip():  # bytes after the last newline: a write cut short
            warnings.warn(f"{path}: line {number + 1} is incomplete (torn write): skipped", StoreWarning, stacklevel=3)


def torn_tail(path: str | os.PathLike) -> tuple[str, int] | None:
    """(the warning `_lines` gives for this store's torn last line, the length in bytes of what
    comes before that line), or None when the last line is sound. Reads only the tail, plus a
    newline count when torn, so a columnar reader can drop that line under exactly these rules."""
    with reading(path) as f:
        size = start = f.seek(0, os.SEEK_END)
        blocks, newlines = [], 0
        while start > 0 and newlines < 2:  # enough for the tail and the last complete line
            step = min(start, 1 << 20)
            start -= step
            f.seek(start)
            blocks.append(f.read(step))
            newlines += blocks[-1].count(b"\n")
        lines = b"".join(reversed(blocks)).split(b"\n")
        tail = lines[-1]
        last = lines[-2] if len(lines) > 2 or (len(lines) == 2 and start == 0) else None  # a whole line
        if tail.strip():
            message, keep = "is incomplete (torn write): skipped", size - len(tail)
        elif not tail and last is not None and last.strip():
            try:
                json.loads(last)
                return None
            except (json.JSONDecodeError, UnicodeDecodeError):
                message, keep = "is not valid JSON (torn write?): skipped", size - len(last) - 1
        else:
            return None
        f.seek(0)
        newlines = sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 24), b""))
    number = newlines + 1 if tail.strip() else newlines
    return f"{path}: line {number} {message}", keep


def iter_entries(path: str | os.PathLike) -> Iterator[dict]:
    """Every line as an envelope {"sweep": dict | None, "record": dict | None, "error": str | None}."""
    for _, obj in _lines(path):
        if is_envelope(obj):
            yield {"sweep": obj["sweep"], "record": obj["record"], "error": obj.get("error")}
        else:
            yield {"sweep": None, "record": obj, "error": None}


def iter_numbered_records(path: str | os.PathLike, mentioning: bytes | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, bench record) per line holding one: a plain record, or an envelope's."""
    for number, obj in _lines(path, mentioning):
        record = obj["record"] if is_envelope(obj) else obj
        if record is not None:
            yield number, record


def iter_records(path: str | os.PathLike, mentioning: bytes | None = None) -> Iterator[dict]:
    """The bench records in a plain or sweep JSONL store, in file order (envelopes without a record skipped)."""
    for _, record in iter_numbered_records(path, mentioning):
        yield record


def repair_tail(path: str | os.PathLike) -> bool:
    """Cut an incomplete last line off the store so the next append starts a fresh line.

    Returns True when something was cut. Only bytes after the last newline, or a
    last line that is not JSON, are removed; complete records are never touched.
    """
    path = Path(path)
    if not path.exists():
        return False
    with open(path, "r+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # an append in another process (durable.append_jsonl) is never cut mid-line
        data = f.read()
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
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return True
