"""`benchrun sweep`: run every combination of a plan file, resumably, into one JSONL store.

    benchrun sweep plan.yaml [--store results/sweep.jsonl] [--retries N] [--timeout S] [--max-points N] [--dry-run]

The plan (docs/sweeps.md) lists values per axis: framework, model, batch_size,
ranks, num_ps, strategy, data, runtime, image; the sweep runs their Cartesian
product, skipping combinations that cannot work (listed at start, with the
rule). A plan is counted before it is expanded: one of more than --max-points
combinations (default 10,000) is refused in one line naming its size and axes;
a dry run of more than 200 is a summary. Each finished run is one line in the
store, appended and fsynced at once; a rerun skips what is already there with
status ok or oom, so a sweep killed at any moment loses at most the run in
progress.

When the store cannot be written mid-sweep (file system full, quota, NFS
gone), the entry just measured is kept in a pending file in the temp dir, the
sweep stops with one line saying why and where (exit 5), and the next run of
the same store appends the pending entries first: nothing lost, nothing run twice.

Exit codes: 0 every point ok or oom, 1 some point failed (after its retries),
2 bad plan or options (nothing run, store untouched), 5 the store could not be
written (the sweep stopped; the entry is in the pending file named), 6 --mlflow's
tracking store cannot be reached at start (nothing run), 130 interrupted.

With --mlflow, each record is logged to MLflow once it is in the store; if the tracking
store fails mid-sweep, one warning says so, the sweep goes on without it, and
`benchrun export STORE --mlflow URI` later logs what is missing (it skips what is there).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.core import durable
from benchmarks.core.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_OUTPUT, EXIT_USAGE, UsageError
from benchmarks.core.processes import ENDING_SIGNALS, StopScope, sweep_deadline

from .. import dispatch, mlflow_export, store
from ..sweep import (
    MAX_POINTS,
    Plan,
    PlanError,
    Point,
    check_point,
    check_size,
    combinations,
    expand,
    factors,
    load_plan,
    request_for,
)

DEFAULT_STORE = "results/sweep.jsonl"
DONE = ("ok", "oom")  # results: never re-run
SHOWN = 200  # a plan of more points is summarised (its axes, its first and last few points), not listed point by point
ENDS = 5  # points shown at each end of a summary
RETRY = ("failed", "timeout")  # re-run with --retries (a point with no record counts as failed)


def add_parser(sub) -> None:
    p = sub.add_parser("sweep", help="run the product of a plan file into a resumable JSONL store",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("plan", help="YAML plan file (docs/sweeps.md)")
    p.add_argument("--store", default=DEFAULT_STORE, help=f"append-only JSONL store (default: {DEFAULT_STORE})")
    p.add_argument("--retries", type=int, default=0, help="re-run a failed or timed-out point up to N more times (default: 0)")
    p.add_argument("--timeout", type=float,
                   help="seconds per run, recorded as 'timeout' (default: the plan's timeout, else none)")
    p.add_argument("--max-points", type=int, default=MAX_POINTS, metavar="N",
                   help=f"refuse a plan of more than N combinations, counted before any is built "
                        f"(default: {MAX_POINTS:,})")
    p.add_argument("--dry-run", action="store_true",
                   help=f"list what would run, skip and be kept, with each command (over {SHOWN} points: a summary); "
                        "run nothing")
    mlflow_export.add_options(p, "also log each stored record as an MLflow run as it comes, as `export --mlflow`")
    p.set_defaults(run=run)


# --- checks before anything runs ---------------------------------------------------------------

@dataclass
class Census:
    """A plan counted in one lazy pass over its combinations: counts, and the skipped points while few."""

    total: int = 0
    runnable: int = 0
    done: int = 0  # runnable points the store already has (ok or oom)
    reasons: Counter = field(default_factory=Counter)  # skip rule -> points
    skipped: list = field(default_factory=list)  # (point, reason), the first SHOWN

    def skip(self, point: Point, reason: str) -> None:
        self.reasons[reason] += 1
        if len(self.skipped) < SHOWN:
            self.skipped.append((point, reason))


def check_plan(plan: Plan, label: str, timeout_s: float | None) -> Census:
    """Every runnable point checked (check_point) before anything runs, one at a time: the first problem is
    a UsageError; a plan whose every combination is skipped, too."""
    census = Census()
    with tempfile.TemporaryDirectory(prefix="benchrun-dry-run-") as scratch:  # one for all: mounts must exist
        for point, reason in combinations(plan):
            census.total += 1
            if reason:
                census.skip(point, reason)
                continue
            census.runnable += 1
            problem = check_point(point, request_for(point, timeout_s), label, scratch)
            if problem:
                raise UsageError(problem)
    if not census.runnable:
        raise UsageError(f"{label}: every combination is skipped by a rule ({census.total} skipped: "
                         f"{census.skipped[0][1]}, ...)")
    return census


# --- the store ---------------------------------------------------------------------------------

def read_store(path: Path) -> Iterator[dict]:
    """The store's entries one at a time: a store of 100,000 records (GBs as Python objects) is never all
    in memory. Its warnings are printed once it is read through; a corrupt line is a UsageError."""
    if not path.exists():
        return
    if not path.is_file():
        raise UsageError(f"--store {str(path)!r} is not a file")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", store.StoreWarning)
        try:
            yield from store.iter_entries(path)
        except store.CorruptStore as error:
            raise UsageError(f"--store {error}") from None
    for warning in caught:
        print(f"benchrun: warning: {warning.message}", file=sys.stderr)


PENDING = "sweep"  # the store's pending file (durable.pending_path): entries measured while it could not be written


def _entry_key(entry: dict):
    """What makes a store entry the same entry: its point and attempt (a run's own entry has no sweep section)."""
    return (entry["sweep"]["config_hash"], entry["sweep"].get("attempt")) if entry["sweep"] else None


def recover_pending(console, store_path: Path) -> None:
    """Append the entries a previous run could not write (store full), once each, then drop the file."""
    try:
        recovered = durable.append_pending(store_path, PENDING, _entry_key, read_store)
    except OSError as error:
        raise UsageError(f"--store {str(store_path)!r}: cannot append the pending entries of "
                         f"{durable.pending_path(store_path, PENDING)} ({error.strerror}): free space first") from None
    if recovered is not None:
        count, pending = recovered
        console.print(f"recovered {count} entr{'y' if count == 1 else 'ies'} measured while {store_path} was "
                      f"not writable (from {pending})")


def status_of(entry: dict) -> str:
    return entry["record"]["status"] if entry.get("record") else "failed"


# --- running one point -------------------------------------------------------------------------

class Stop(StopScope):
    """Ctrl-C, SIGTERM or any other ending signal on the sweep (processes.ENDING_SIGNALS): store the run in
    progress as it ends, keep every finished point, start no other."""

    def __init__(self):
        super().__init__(then=self._on_stop, signals=ENDING_SIGNALS)
        self.requested = False
        self.child: subprocess.Popen | None = None

    def _on_stop(self, signum):
        again = self.requested
        self.requested = True
        # Ctrl-C reaches the whole foreground group (bench records 'interrupted' by itself); any other signal
        # (sent to the sweep alone), or a second Ctrl-C, is passed on: the point runner stops everything it started.
        if self.child is not None and self.child.poll() is None and (signum != signal.SIGINT or again):
            self.child.send_signal(signal.SIGTERM)


def run_point(request: dispatch.RunRequest, log_path: Path, stop: Stop, deadline_s: float | None) -> dict:
    """Run one point through runners.pointrun; returns {record, exit_code, command, error}."""
    read_fd, write_fd = os.pipe()
    package_root = str(Path(__file__).resolve().parents[2])  # this checkout's runners and benchmarks
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
    payload = json.dumps(request.to_json())
    with open(log_path, "ab") as log:
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", "runners.pointrun", str(os.getpid()), str(write_fd)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, pass_fds=(write_fd,), env=env,
            )
        finally:
            os.close(write_fd)
    stop.child = child
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(read_fd, 65536), b"")), daemon=True)
    reader.start()
    with contextlib.suppress(BrokenPipeError):
        child.stdin.write(payload.encode())
        child.stdin.close()
    started = time.monotonic()
    killed = None
    while child.poll() is None:
        if deadline_s is not None and killed is None and time.monotonic() - started > deadline_s:
            killed = f"no result {deadline_s:g} s after the start: stopped by the sweep"
            child.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=0.2)
    stop.child = None
    reader.join(timeout=10)
    os.close(read_fd)
    try:
        result = json.loads(b"".join(chunks))
    except json.JSONDecodeError:
        result = {"record": None, "exit_code": child.returncode, "command": [], "error": None}
    if result["record"] is None and result.get("error") is None:
        result["error"] = killed or _no_record_reason(result, log_path)
    return result


def _no_record_reason(result: dict, log_path: Path) -> str:
    code = result["exit_code"]
    signum = (-code if code < 0 else code - 128 if 128 < code < 160 else None) if isinstance(code, int) else None
    how = f"killed by signal {signum}" if signum else f"exit code {code}"  # launchers report 128 + signal
    last = ""
    with contextlib.suppress(OSError):
        lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
        last = f"; last output: {lines[-1].strip()[:300]}" if lines else ""
    command = f"; command: {shlex.join(result['command'])}" if result.get("command") else ""
    return f"bench wrote no record ({how}){last}{command}"


# --- the sweep ---------------------------------------------------------------------------------

def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _outcome_text(entry: dict) -> str:
    record = entry["record"]
    if record is None:
        return f"failed: {entry['error']}"
    status = record["status"]
    if status == "ok":
        return f"{record['throughput']['images_per_sec']:.1f} images/sec"
    error = record.get("error") or {}
    return error.get("message", "") if isinstance(error, dict) else str(error)


def run(args) -> int:
    from rich.console import Console

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    if args.retries < 0:
        raise UsageError(f"--retries must be 0 or more, got {args.retries}")
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError(f"--timeout must be positive, got {args.timeout:g}")
    if args.max_points < 1:
        raise UsageError(f"--max-points must be 1 or more, got {args.max_points}")
    try:
        plan: Plan = load_plan(args.plan)
        check_size(plan, args.plan, args.max_points)
    except PlanError as error:
        for line in error.lines:
            print(f"benchrun: error: {line}", file=sys.stderr)
        return EXIT_USAGE
    timeout_s = args.timeout if args.timeout is not None else plan.timeout
    census = check_plan(plan, args.plan, timeout_s)
    store_path = Path(args.store)
    if args.dry_run:
        return _dry_run(console, args, plan, census, timeout_s, store_path)
    durable.check_file(store_path, "--store")
    points, _ = expand(plan)  # no more than --max-points
    with durable.sole_writer(store_path, "--store", f"the sweep of {args.plan}"):
        return _run_sweep(console, args, points, census, store_path, timeout_s)


def _stored(store_path: Path) -> tuple[dict, dict]:
    """(done: config_hash -> status, attempts: config_hash -> last attempt) of the store's entries."""
    done, attempts = {}, {}
    for e in read_store(store_path):
        if e["sweep"]:
            h = e["sweep"]["config_hash"]
            attempts[h] = max(attempts.get(h, 0), int(e["sweep"].get("attempt", 0)))
            if status_of(e) in DONE:
                done[h] = status_of(e)
    return done, attempts


def _announce(console, label: str, census: Census, store_path: Path) -> None:
    skipped = census.total - census.runnable
    console.print(f"sweep {label}: {census.total} combinations: {census.runnable - census.done} to run, "
                  f"{census.done} already in {store_path}, {skipped} skipped by rule")
    if skipped <= SHOWN:
        for point, reason in census.skipped:
            console.print(f"  skipped  {point.label()}  ({reason})")
        return
    for reason, count in census.reasons.items():
        console.print(f"  skipped  {count:,} points  ({reason})")


def _point_text(point: Point, reason: str | None, done: dict, timeout_s, scratch: str) -> str:
    """One point as --dry-run lists it: hash, run/done/skip, label, and (to run) its exact command."""
    if reason:
        return f"{point.config_hash}  skip  {point.label()}  ({reason})\n"
    state = "done" if point.config_hash in done else "run"
    text = dispatch.dry_run_text(request_for(point, timeout_s), scratch=scratch)  # as `benchrun run --dry-run` shows it
    return f"{point.config_hash}  {state:4}  {point.label()}\n" + "".join(f"    {line}\n" for line in text.splitlines())


def _dry_run(console, args, plan: Plan, census: Census, timeout_s, store_path: Path) -> int:
    """Every point (the ones to run first, then the skipped) or, over SHOWN points, a summary; one lazy pass
    counts what the store has, another prints."""
    done, _ = _stored(store_path)
    if done:
        census.done = sum(1 for point, reason in combinations(plan) if not reason and point.config_hash in done)
    _announce(console, args.plan, census, store_path)
    with tempfile.TemporaryDirectory(prefix="benchrun-dry-run-") as scratch:
        if census.total > SHOWN:
            _summary_of_plan(plan, census, done, timeout_s, scratch)
            return EXIT_OK
        skipped = []
        for point, reason in combinations(plan):
            if reason:
                skipped.append((point, reason))
            else:
                print(_point_text(point, None, done, timeout_s, scratch), end="")
        for point, reason in skipped:
            print(_point_text(point, reason, done, timeout_s, scratch), end="")
    return EXIT_OK


def _summary_of_plan(plan: Plan, census: Census, done: dict, timeout_s, scratch: str) -> None:
    """A large plan's dry run: its size, its axes and their sizes, its first and last ENDS points in plan order."""
    sizes = " x ".join(f"{axis} {n:,}" for axis, n in factors(plan)) or "none"
    print(f"{census.total:,} combinations, over the {SHOWN} listed one by one: a summary")
    print(f"axes with more than one value: {sizes}")
    last: deque = deque(maxlen=ENDS)
    print(f"first {ENDS}:")
    for index, (point, reason) in enumerate(combinations(plan)):
        if index < ENDS:
            print(_point_text(point, reason, done, timeout_s, scratch), end="")
        else:
            last.append((point, reason))
    print(f"... {census.total - ENDS - len(last):,} more ...\nlast {len(last)}:")
    for point, reason in last:
        print(_point_text(point, reason, done, timeout_s, scratch), end="")


def _run_sweep(console, args, points: list[Point], census: Census, store_path: Path, timeout_s) -> int:
    """The sweep proper, its store held (durable.sole_writer): the store's state is read under the lock,
    so two sweeps of one plan never both run a point."""
    recover_pending(console, store_path)
    done, attempts = _stored(store_path)
    todo = [p for p in points if p.config_hash not in done]
    census.done = len(points) - len(todo)
    _announce(console, args.plan, census, store_path)
    tracker = None
    if args.mlflow is not None:  # reached before anything runs: a wrong URI costs no measurement
        tracker = mlflow_export.Tracker(args.mlflow or None, args.mlflow_experiment)
    store_path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", store.StoreWarning)
        store.repair_tail(store_path)
    for warning in caught:
        console.print(f"benchrun: warning: {warning.message}")
    log_dir = store_path.with_name(store_path.name + ".logs")
    log_dir.mkdir(exist_ok=True)
    plan_path = str(Path(args.plan).resolve())
    deadline = sweep_deadline(timeout_s)
    final: dict[str, str] = {}
    unwritable = None
    with Stop() as stop:
        try:
            _sweep(console, todo, timeout_s, attempts, final, store_path, log_dir, plan_path, args.retries, deadline,
                   stop, MlflowLog(console, tracker))
        except durable.OutputError as error:
            unwritable = error
    counts = {**dict.fromkeys(("ok", "oom", "failed", "timeout", "interrupted"), 0), **Counter(final.values())}
    _summary(console, counts, census.done, census.total - census.runnable, len(todo) - len(final), store_path)
    if unwritable is not None:
        saved = (f"the last entry is kept in {unwritable.fallback} and is appended by the next run of this sweep"
                 if unwritable.fallback else "the temp dir is not writable either: the last entry is lost")
        print(f"benchrun: error: sweep stopped: --store {unwritable}: {saved}; free space and rerun to resume",
              file=sys.stderr, flush=True)
        return EXIT_OUTPUT
    if stop.requested:
        return EXIT_INTERRUPTED
    return EXIT_OK if all(s in DONE for s in final.values()) else EXIT_FAILED


class MlflowLog:
    """Each stored record to MLflow as it comes (tracker None: without --mlflow); after the first failure of
    the tracking store, nothing more (the store has every record; `benchrun export --mlflow` catches up later)."""

    def __init__(self, console, tracker):
        self.console, self.tracker = console, tracker

    def __call__(self, entry: dict) -> None:
        if self.tracker is None or entry["record"] is None:
            return
        try:
            self.tracker.export(entry["record"], entry["sweep"])
        except mlflow_export.TrackingError as error:
            self.console.print(f"benchrun: warning: {error}; not logging to MLflow for the rest of this sweep "
                               f"(`benchrun export STORE --mlflow {self.tracker.uri}` logs what is missing)")
            self.tracker = None


def _sweep(console, todo, timeout_s, attempts, final, store_path, log_dir, plan_path, retries, deadline, stop,
           logged) -> None:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("sweep", total=len(todo))
        for point in todo:
            h = point.config_hash
            for tries in range(retries + 1):
                if stop.requested:
                    return
                attempt = attempts.get(h, 0) + 1
                attempts[h] = attempt
                progress.update(task, description=f"{point.label()} (attempt {attempt})")
                log_path = log_dir / f"{h}.{attempt}.log"
                started, t0 = _now(), time.monotonic()
                result = run_point(request_for(point, timeout_s), log_path, stop, deadline)
                entry = {
                    "sweep": {
                        "config_hash": h,
                        "plan": plan_path,
                        "attempt": attempt,
                        "point": point.values,
                        "bench": point.bench,
                        "launcher": point.launcher,
                        "started_utc": started,
                        "duration_s": round(time.monotonic() - t0, 3),
                        "exit_code": result["exit_code"],
                        "command": result["command"],
                        "log": str(log_path),
                    },
                    "record": result["record"],
                    "error": result["error"],
                }
                status = status_of(entry)
                final[h] = status
                durable.append_or_fallback(store_path, entry, durable.pending_path(store_path, PENDING).name)
                logged(entry)
                progress.console.print(f"{status:>11}  {point.label()}  (attempt {attempt}): {_outcome_text(entry)}")
                if status not in RETRY or stop.requested:
                    break
            progress.advance(task)


def _summary(console, counts: dict, kept: int, skipped: int, not_run: int, store_path: Path) -> None:
    from rich.table import Table

    table = Table(title=f"sweep summary ({store_path})", title_justify="left")
    table.add_column("result")
    table.add_column("points", justify="right")
    for status, n in counts.items():
        table.add_row(status, str(n))
    table.add_row("already in store", str(kept))
    table.add_row("skipped by rule", str(skipped))
    if not_run:
        table.add_row("not run (stopped)", str(not_run))
    console.print(table)
