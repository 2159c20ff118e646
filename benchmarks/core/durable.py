"""Writing records so that a measurement, once taken, is never lost: `bench --output`, `benchrun run
--results`, `benchrun sweep --store` and `benchrun compare-runtimes --out`; and outputs made whole or
not at all (`bench make-dataset`, `benchrun report --out`, `benchrun export`): staged beside their
place, put there once complete, removed when the file system takes no more (NoRoom: one line).

Paths are checked before anything runs by a real probe (create + remove a file), not `os.access`,
which root always passes. An append is one locked (flock), fsynced write, cut back when it fails
part-way, after cutting a torn last line a killed writer left; when it still fails the record goes
to a fallback file in the temp dir (for a store a later run writes again, its pending file: appended by
that run first, append_pending). A FIFO or terminal gets the line whole, a FIFO's reader waited for
at most STREAM_WAIT_S. docs/bench.md (`--output`) and docs/sweeps.md (Store format) say more.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Hashable, Iterable

from .errors import UsageError

NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)  # a file system that takes no more: full, over quota, read-only
MIN_FREE_BYTES = 1 << 20  # refuse an output on a file system with less free space than this (a record is ~10 KB)
STREAM_WAIT_S = 30.0  # how long a record waits for a FIFO's reader to appear


class OutputError(Exception):
    """A record could not be appended; `fallback` is where it was saved instead (None if nowhere)."""

    def __init__(self, path, error: OSError, fallback: Path | None):
        reason = error.strerror or (os.strerror(error.errno) if error.errno else str(error))
        super().__init__(f"could not write to {str(path)!r} ({reason})")
        self.path, self.reason, self.fallback = path, reason, fallback


class NoRoom(Exception):
    """An output the file system would not take while it was written (NO_ROOM): the environment, not a
    bug, and not bad input either (the checks before passed); nothing of it is left behind. Exit 5."""

    def __init__(self, what: str, error: OSError, progress: str = ""):
        reason = os.strerror(error.errno)
        super().__init__(f"{what}: {reason[0].lower()}{reason[1:]} ({progress}nothing is left behind): "
                         "free space, or write elsewhere")


def no_room(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in NO_ROOM


def room_problem(error: BaseException, directory: str | os.PathLike) -> OSError | None:
    """The file system's refusal behind an output's failure, or None: an OSError of NO_ROOM, or, where a
    library loses the errno on its way up (the torch profiler logs "Failed to write to log file!" and then
    finds no trace; TensorFlow's summary writer raises ResourceExhaustedError), any failure after which the
    nearest existing folder of `directory` has under MIN_FREE_BYTES free."""
    if no_room(error):
        return error
    if _free_space_problem(_nearest_existing(Path(directory))):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return None


def _nearest_existing(start: Path) -> Path:
    """`start` or its nearest existing ancestor (the working directory for a relative path none of whose
    folders exist)."""
    return next((p for p in [start, *start.parents] if p.exists()), Path("."))


def _probe_ancestor(start: Path, path, flag: str) -> str | None:
    """Why nothing can be created in the nearest existing directory at or above `start`, or None;
    UsageError when what exists there is not a directory."""
    ancestor = _nearest_existing(start)
    if not ancestor.is_dir():
        raise UsageError(f"{flag} {str(path)!r}: {str(ancestor)!r} is not a directory")
    return _probe_dir(ancestor)


def _probe_dir(directory: Path) -> str | None:
    """Why a file cannot be created in `directory` (that exists), or None."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".dlbench-probe-", dir=directory)
    except OSError as error:
        return os.strerror(error.errno) if error.errno else str(error)
    os.close(fd)
    os.unlink(probe)
    return _free_space_problem(directory)


def _free_space_problem(directory: Path) -> str | None:
    try:
        stat = os.statvfs(directory)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    if free < MIN_FREE_BYTES:
        return f"only {free} bytes free on its file system"
    return None


def check_file(path: str | os.PathLike, flag: str) -> None:
    """Refuse an output file that cannot be appended to (raises UsageError); creates nothing."""
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{flag} {str(path)!r} is a directory; give a file path")
    if target.exists():
        try:  # non-blocking: opening a FIFO without a reader would wait forever
            os.close(os.open(target, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))
        except OSError as error:
            if error.errno != errno.ENXIO:  # ENXIO: a FIFO whose reader has not come yet (it may)
                raise UsageError(f"{flag} {str(path)!r} is not writable ({os.strerror(error.errno)})") from None
        problem = _free_space_problem(target.parent) if _is_regular(target) else None
    else:
        problem = _probe_ancestor(target.parent, path, flag)
    if problem:
        raise UsageError(f"{flag} {str(path)!r} is not writable ({problem})")


def check_dir(path: str | os.PathLike, flag: str) -> None:
    """Refuse an output directory that cannot be created or written (raises UsageError); creates nothing."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{flag} {str(path)!r} exists and is not a directory")
    problem = _probe_ancestor(target, path, flag)
    if problem:
        raise UsageError(f"{flag} {str(path)!r} is not writable ({problem})")


def cut_torn_tail(fd: int) -> int:
    """Cut bytes after the last newline (a line a killed writer left incomplete); returns bytes cut."""
    size = os.fstat(fd).st_size
    if size == 0:
        return 0
    window = min(size, 1 << 16)
    while True:
        data = os.pread(fd, window, size - window)
        if data.endswith(b"\n"):
            return 0
        newline = data.rfind(b"\n")
        if newline >= 0 or window == size:
            keep = size - window + newline + 1
            os.ftruncate(fd, keep)
            return size - keep
        window = min(size, window * 4)


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return True  # absent: it will be created as a regular file


def _write_all(fd: int, line: bytes) -> None:
    written = 0
    while written < len(line):
        n = os.write(fd, line[written:])
        if n == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written += n


def _open_stream(path: Path, wait_s: float) -> int:
    """Open a FIFO or device for writing, waiting at most `wait_s` for a FIFO's reader (ENXIO meanwhile)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
            break
        except OSError as error:
            if error.errno != errno.ENXIO:
                raise
            if time.monotonic() >= deadline:
                raise OSError(errno.ENXIO, f"no reader opened the FIFO within {wait_s:g} s") from None
            time.sleep(0.1)
    os.set_blocking(fd, True)
    return fd


def append_jsonl(path: str | os.PathLike, obj: dict, stream_wait_s: float = STREAM_WAIT_S) -> None:
    """Append one JSON line: all of it or none of it (raises OSError after undoing a partial write)."""
    line = (json.dumps(obj) + "\n").encode()
    if not _is_regular(Path(path)):
        fd = _open_stream(Path(path), stream_wait_s)
        try:
            _write_all(fd, line)
        finally:
            os.close(fd)
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by close; another writer's line is never cut as torn
        cut = cut_torn_tail(fd)
        if cut:
            print(f"dlbench: warning: {path}: cut an incomplete last line ({cut} bytes) before appending",
                  file=sys.stderr, flush=True)
        start = os.fstat(fd).st_size
        try:
            _write_all(fd, line)
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, start)
                os.fsync(fd)
            except OSError:
                pass  # the next append cuts what is left (cut_torn_tail)
            raise
    finally:
        os.close(fd)


@contextmanager
def sole_writer(path: str | os.PathLike, flag: str, who: str):
    """Hold `path` (through PATH.lock beside it) for the length of the block; a second holder is
    refused at once in one line naming the first (UsageError). The kernel drops the lock when its
    process dies, so a killed sweep never leaves its store locked."""
    lock_path = Path(f"{path}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process"
            raise UsageError(f"{flag} {str(path)!r} is being written by {holder}; wait for it to end, "
                             f"or give another {flag}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{who} (pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%dT%H:%M:%S%z')})"
                      .encode(), 0)
        yield
    finally:
        os.close(fd)


def fallback_dir() -> Path:
    return Path(tempfile.gettempdir())


def fallback(obj: dict, name: str) -> Path | None:
    """Save `obj` as one JSON line in the temp dir; the path, or None if that fails too."""
    path = fallback_dir() / name
    try:
        append_jsonl(path, obj)
    except OSError:
        return None
    return path


def append_or_fallback(path: str | os.PathLike, obj: dict, fallback_name: str) -> None:
    """append_jsonl, or save to the fallback and raise OutputError naming it."""
    try:
        append_jsonl(path, obj)
    except OSError as error:
        raise OutputError(path, error, fallback(obj, fallback_name)) from None


def pending_path(target: str | os.PathLike, kind: str) -> Path:
    """The temp-dir file holding the entries meant for `target` that could not be appended to it (its file system
    full or read-only): named after `target`'s absolute path, so the next run that writes `target` finds them
    (`kind` names the writer, for whoever lists the temp dir: sweep, compare-records, ...)."""
    digest = hashlib.sha256(str(Path(target).resolve()).encode()).hexdigest()[:12]
    return fallback_dir() / f"dlbench-{kind}-pending-{digest}.jsonl"


def read_jsonl(path: Path) -> Iterable[dict]:
    """The JSON objects of a JSONL file, one at a time; a line a killed writer left torn is skipped."""
    with open(path, errors="replace") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                yield entry


def append_pending(target: str | os.PathLike, kind: str, key: Callable[[dict], Hashable | None],
                   read: Callable[[Path], Iterable[dict]] = read_jsonl) -> tuple[int, Path] | None:
    """Append to `target` what earlier runs kept in its pending file (append_or_fallback to pending_path), each
    entry once, then remove the file: (entries appended, the file's path), or None when there was none.

    Once, whatever happened before: an entry whose key (`key(entry)`; None: no key, never appended) `target`
    already holds is skipped, so a run killed between an append and the removal, or half-way through the file,
    leaves the next run to append only what is still missing, and an entry saved twice is appended once. An
    append that fails raises OSError and keeps the file for the run after (its entries appended so far are found
    by key then). The caller holds `target` (sole_writer): no one appends beside it meanwhile."""
    pending = pending_path(target, kind)
    if not pending.exists():
        return None
    held = {key(entry) for entry in read(Path(target))} if Path(target).exists() else set()
    appended = 0
    for entry in read(pending):
        found = key(entry)
        if found is None or found in held:
            continue
        append_jsonl(target, entry)
        held.add(found)
        appended += 1
    pending.unlink()
    return appended, pending


@dataclass
class Staged:
    """Where a staged output is written (`path`), and how far it got (`progress`, named if the disk fills)."""

    path: Path
    progress: str = ""


@contextmanager
def staged_dir(target: str | os.PathLike, what: str):
    """Write a directory's files into a hidden partial directory (same file system; readers of ImageFolder
    trees skip dot-directories), then put them in place, so no file is ever seen half-written: an absent
    `target` is staged beside it and the whole directory renamed onto it; an existing one (its parent may be
    one we cannot write: checks before a run ask only about `target`) is staged inside it and each entry
    renamed into it. On any failure the partial directory is removed; a file system that takes no more
    raises NoRoom(`what`)."""
    target = Path(target)
    staged = None
    try:
        inside = target.is_dir()
        if not inside:
            target.parent.mkdir(parents=True, exist_ok=True)
        home = target if inside else target.parent
        staged = Staged(Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=home)))
        yield staged
        if inside:
            for entry in staged.path.iterdir():
                os.replace(entry, target / entry.name)
            staged.path.rmdir()
        else:
            os.replace(staged.path, target)
    except BaseException as error:
        if staged is not None:
            shutil.rmtree(staged.path, ignore_errors=True)
        if no_room(error):
            raise NoRoom(what, error, staged.progress if staged else "") from None
        raise


@contextmanager
def staged_file(target: str | os.PathLike, what: str):
    """The path of a hidden partial file beside `target` to write, renamed onto `target` once the block ends;
    removed on any failure, and a file system that takes no more raises NoRoom(`what`)."""
    target = Path(target)
    partial = target.with_name(f".{target.name}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        yield partial
        os.replace(partial, target)
    except BaseException as error:
        partial.unlink(missing_ok=True)
        if no_room(error):
            raise NoRoom(what, error) from None
        raise
