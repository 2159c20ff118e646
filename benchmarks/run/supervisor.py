"""Runs the worker process and turns any way it can end into a record.

The worker writes its own record when it can (ok, oom caught as an exception,
crash). When it cannot -- SIGKILL from the OOM killer, an abort in native
code, a timeout, Ctrl-C -- the supervisor writes one from what it saw.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

from ..core.errors import EXIT_CODE_BY_STATUS, UsageError
from ..core.processes import ENDING_SIGNALS, StopScope, at_boundary, stop_process_group, take_early
from ..distributed import strategies
from ..distributed import world as worlds
from ..distributed.rendezvous import report_failure
from ..distributed.session import silent_ranks_text
from ..frameworks.base import looks_like_oom
from ..measure.memory import AS_LIMIT_NEAR, PeakSampler, address_space_limit, gib
from ..results import record
from ..settings.config import BenchConfig
from . import rank_steps
from .worker import BOUNDARY_SIGNAL, STACKS_SIGNAL

STDERR_TAIL_LINES = 200
STOP_FILE = "stop.json"  # why the supervisor stopped the worker
WARNING_FILE = "warning.json"  # the signal that asked for a stop at the next step boundary (_stop_at_boundary)
SILENCE_FILE = "silent.json"  # process 0's worker: the ranks it no longer hears from (RankSession.silent)
STACKS_WAIT_S = 2.0  # how long a timed-out worker's stack dump is given to reach stderr


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _relay(source, sink: TextIO, tail: collections.deque | None, bar=None) -> None:
    for raw in iter(source.readline, b""):
        line = raw.decode(errors="replace")
        try:
            if bar is not None and not bar.feed(line.rstrip("\n")):
                bar.print(line.rstrip("\n"))
            elif bar is None:
                sink.write(line)
                sink.flush()
        except (OSError, ValueError):  # stdout closed or its disk full: keep draining, the run goes on
            pass
        if tail is not None:
            tail.append(line.rstrip("\n"))
    source.close()


def oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has killed since boot (/proc/vmstat, Linux >= 4.13;
    host-wide, also inside a container), or None where the count is not kept."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def classify_exit(
    returncode: int,
    stderr_tail: list[str],
    vm_peak: int = 0,
    as_limit: int | None = None,
    oom_kills_during: int | None = None,
) -> tuple[str, dict]:
    """(status, error) for a worker that ended without writing a record (docs/results.md: how `oom` is
    decided). `oom_kills_during`: how far the kernel's count of OOM kills moved, None where unknown."""
    text = "\n".join(stderr_tail)
    last = next((line.strip() for line in reversed(stderr_tail) if line.strip()), "")
    oom_line = next((line.strip() for line in reversed(stderr_tail) if looks_like_oom(line)), None)
    signal_name = signal.Signals(-returncode).name if returncode < 0 else None
    error = {"exit_code": returncode if returncode >= 0 else None, "signal": signal_name}

    def ended(status: str, message: str) -> tuple[str, dict]:
        return status, {**error, "kind": "oom" if status == "oom" else "crash", "message": message}

    if oom_line is not None or looks_like_oom(text):
        return ended("oom", oom_line or last)
    if returncode == -signal.SIGKILL and oom_kills_during is None:
        return ended("oom", "worker killed by SIGKILL: most likely the kernel OOM killer (check `dmesg`)")
    if returncode == -signal.SIGKILL and oom_kills_during > 0:
        return ended("oom", f"worker killed by the kernel OOM killer (its count of OOM kills rose by {oom_kills_during} "
                            "during the run)")
    if returncode < 0 and -returncode in ENDING_SIGNALS:  # someone else's stop (Slurm signals every process of a step)
        return "interrupted", {**error, "kind": "interrupted", "message": f"worker stopped by {signal_name}"}
    if returncode == -signal.SIGKILL:
        return ended("failed", "worker killed by SIGKILL, not by the OOM killer (the kernel's count of OOM kills did "
                               "not move): by another process or a scheduler's limit")
    if returncode < 0 and as_limit and vm_peak >= AS_LIMIT_NEAR * as_limit:
        return ended("oom", f"worker died with {signal_name} after its address space reached {gib(vm_peak)} of the "
                            f"{gib(as_limit)} limit (ulimit -v): out of memory")
    reason = f"worker died with {signal_name}" if signal_name else f"worker exited with code {returncode}"
    return ended("failed", f"{reason}: {last}" if last else reason)


def inherited_launcher_fds(env) -> tuple[int, ...]:
    """Descriptors a launcher handed to this rank for the worker's MPI_Init: MPICH's Hydra
    and Slurm's pmi2 plugin pass the PMI connection as an inherited fd named by PMI_FD."""
    fd = env.get("PMI_FD", "")
    return (int(fd),) if fd.isdigit() else ()


def _virtual_size(pid: int) -> int:
    import psutil

    try:
        return psutil.Process(pid).memory_info().vms
    except psutil.Error:  # exited or zombie: keep the last peak
        return 0


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _show_stacks(proc: subprocess.Popen, tail: collections.deque) -> None:
    """Where a timed-out run waited: every thread's Python stack on stderr before it is stopped, so a hang
    seen once (in CI, in a sweep's log) shows its cause without being reproduced."""
    def headers() -> int:
        return sum("most recent call first" in line for line in list(tail))

    before = headers()
    try:
        proc.send_signal(STACKS_SIGNAL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STACKS_WAIT_S
    while time.monotonic() < deadline and proc.poll() is None:
        if headers() > before:
            time.sleep(0.2)  # the other threads' stacks follow the first header at once
            return
        time.sleep(0.05)


def _stop_at_boundary(proc: subprocess.Popen, tmp: Path, signum: int) -> None:
    """Slurm's warning, passed on to the worker with its own signal (SIGUSR1 is the stacks'), naming the one that
    came; the run goes on."""
    (tmp / WARNING_FILE).write_text(json.dumps({"signal": signal.Signals(signum).name}))
    try:
        proc.send_signal(BOUNDARY_SIGNAL)  # the worker alone: its group's DataLoader workers would die of it
    except ProcessLookupError:
        pass


def _stop(proc: subprocess.Popen, tmp: Path, status: str, error: dict) -> None:
    """Stop the worker, saying why first: a worker that keeps its results when stopped (`bench comm`'s
    rows) records them with this status. Ranks process 0 no longer hears from are named: they are why a
    run hangs."""
    try:
        silent = json.loads((tmp / SILENCE_FILE).read_text())
    except (OSError, ValueError):
        silent = {}
    if silent:
        error["message"] += f"; {silent_ranks_text(silent, time.time())}"
    (tmp / STOP_FILE).write_text(json.dumps({"status": status, "error": error}))
    stop_process_group(proc)


@dataclass(frozen=True)
class Job:
    """What the worker runs, and what the supervisor needs when the worker writes no record."""

    spec: dict  # the worker's: "measurement" ("module:Class", whose from_spec reads the rest) and its inputs
    rendezvous_port: int  # where a rank that failed tells process 0
    record: Callable[[str, dict, float], dict]  # (status, error, duration_s) -> the record the supervisor writes
    ended: Callable[[], None] = lambda: None  # once the run's record is known, however it ended: what to remove


def training_job(config: BenchConfig, base: dict, *, mllog: bool, mllog_submission: dict | None = None,
                 tensorboard: str | None = None,
                 data_scan: dict | None = None, display_every: int = 0, trace: dict | None = None) -> Job:
    kind = "benchmarks.run.accuracy:AccuracyMeasurement" if config.accuracy_mode else "benchmarks.run.measurement:Measurement"
    spec = {"measurement": kind, "config": {k: v for k, v in config.as_dict().items() if k != "data"}, "base": base,
            "mllog": mllog, "mllog_submission": mllog_submission, "tensorboard": tensorboard, "data_scan": data_scan,
            "display_every": display_every, "trace": trace}
    world, since = worlds.detect(), time.time()
    keeps = world.size > 1 and not strategies.get(config.strategy).gathers_at_chief
    directory = rank_steps.steps_dir(worlds.run_token(), config.rendezvous_port) if keeps else None
    if directory is not None:  # where this rank's worker writes its steps when stopped
        spec["steps_path"] = str(rank_steps.rank_file(directory, world.rank))

    def stopped(status: str, error: dict, duration: float) -> dict:
        """The record of a run whose worker wrote none; a stopped run of several processes keeps what every rank
        timed (rank_steps), read by process 0 once the ranks have written it."""
        sections = {}
        if directory is not None and world.rank == 0 and status in rank_steps.STOPPED:
            sections, said = rank_steps.kept(rank_steps.collect(directory, world.size, since), world.size,
                                             config.batch_size)
            error = {**error, "message": error["message"] + said}
        return record.build(config, base, status, error, duration, **sections)

    def ended() -> None:  # a rank stopped alone leaves its steps, which process 0 (the worker's record won) never read
        if directory is not None and world.rank == 0:
            shutil.rmtree(directory, ignore_errors=True)

    return Job(spec, config.rendezvous_port, stopped, ended)


def supervise(job: Job, *, report: TextIO, timeout_s: float | None, display_every: int = 0) -> tuple[dict | None, int]:
    """Run one benchmark: (record, exit code). The record is None after a usage error
    (exit 2) and for ranks other than 0 that finished their part (exit 0)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dlbench-") as tmp:
        spec_path, result_path = Path(tmp, "spec.json"), Path(tmp, "result.json")
        spec_path.write_text(json.dumps({**job.spec, "result_path": str(result_path), "stop_path": str(Path(tmp, STOP_FILE)),
                                         "silence_path": str(Path(tmp, SILENCE_FILE)),
                                         "warning_path": str(Path(tmp, WARNING_FILE)), "parent_pid": os.getpid()}))
        # Until the worker exists and the try below can stop it, a signal is only noted (raised at arm());
        # one arriving while it is being stopped (the launcher's SIGTERM after a user's Ctrl-C) too: raised
        # there, it would end bench before it writes the record. Slurm's warning (processes.BOUNDARY_SIGNALS)
        # is passed on to a run of one process, which stops at its next step boundary; it stops any other now.
        world = worlds.detect()
        warning = tuple(signum for signum in ENDING_SIGNALS if at_boundary(signum, world.size))
        stop = StopScope(Interrupted, signals=tuple(s for s in ENDING_SIGNALS if s not in warning), once=True,
                         armed=False).install()
        workers: list[subprocess.Popen] = []
        warned = StopScope(signals=warning, then=lambda signum: [_stop_at_boundary(p, Path(tmp), signum)
                                                                 for p in workers]).install()
        take_early(stop)
        take_early(warned)
        oom_kills_before = oom_kills()
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.run.worker", str(spec_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # Ctrl-C reaches us only; we stop the worker's group cleanly
            pass_fds=inherited_launcher_fds(os.environ),
        )
        workers.append(proc)
        if warned.received:  # before the worker existed
            _stop_at_boundary(proc, Path(tmp), warned.received[0])
        tail: collections.deque = collections.deque(maxlen=STDERR_TAIL_LINES)
        bar = None
        if display_every and _is_terminal(sys.stderr):  # a bar with an ETA instead of the step lines
            from ..results.progress import ProgressBar

            bar = ProgressBar(sys.stderr)
            bar.progress.start()
        relays = [
            threading.Thread(target=_relay, args=(proc.stdout, report, None), daemon=True),
            threading.Thread(target=_relay, args=(proc.stderr, sys.stderr, tail, bar), daemon=True),
        ]
        for relay in relays:
            relay.start()
        # Only under `ulimit -v` does the address-space peak classify a crash (classify_exit): without
        # a limit no thread wakes up during the run to compete with it for the CPU.
        as_limit = address_space_limit()
        address_space = PeakSampler(lambda: _virtual_size(proc.pid), interval_s=0.05).start() if as_limit else None
        status, error = None, None
        try:
            stop.arm()
            proc.wait(timeout=timeout_s)
            stop.armed = False
        except subprocess.TimeoutExpired:
            stop.armed = False
            status = "timeout"
            error = {"kind": "timeout", "message": f"run exceeded --timeout {timeout_s:g} s", "signal": None}
            _show_stacks(proc, tail)
            _stop(proc, Path(tmp), status, error)
        except Interrupted as interrupted:
            status = "interrupted"
            error = {"kind": "interrupted", "message": f"stopped by {interrupted}", "signal": str(interrupted)}
            _stop(proc, Path(tmp), status, error)
        finally:
            stop.restore()
            warned.restore()
            for relay in relays:
                relay.join(timeout=5)
            if bar is not None:
                bar.progress.stop()
            vm_peak = address_space.stop() if address_space is not None else 0
        if result_path.exists():  # the worker's own record wins, even over a late timeout or SIGTERM:
            result = json.loads(result_path.read_text())["record"]  # e.g. "rank 1 failed" while being stopped
        elif status is None and proc.returncode == 2:
            return None, 2  # the worker printed the usage error; nothing is recorded
        else:
            if status is None:
                after = oom_kills()
                during = None if after is None or oom_kills_before is None else after - oom_kills_before
                status, error = classify_exit(proc.returncode, list(tail), vm_peak, as_limit, during)
            error.setdefault("exit_code", None)
            result = job.record(status, error, time.monotonic() - started)
        job.ended()
        if result is None:
            return None, 0
        if result["status"] != "ok" and world.rank != 0:
            # Process 0 writes the run's record; tell it why this rank stopped.
            try:
                report_failure(worlds.coordinator_host(world), job.rendezvous_port, world.rank, result, worlds.run_token())
            except UsageError:
                pass  # no address for process 0: the worker already said so
            if result["status"] in rank_steps.STOPPED:
                # Stopped with the run, this rank leaves its outcome (and its steps) to process 0's record and exit
                # code: a launcher that ends the step on a task's bad exit (srun --kill-on-bad-exit kills the other
                # tasks at once) would kill process 0 before it wrote the record; nor does it leave before process 0
                # could write it (rank_steps.LINGER_S: MPICH's Hydra ends the job when a rank of an MPI job leaves).
                time.sleep(rank_steps.LINGER_S)
                return result, 0
        return result, EXIT_CODE_BY_STATUS[result["status"]]
