"""Process control, stated once: which signals end a run and how (the signal policy below, StopScope), stopping
a process group, dying with a parent, finding processes (psutil), turning a wait status into an exit code, leaving
without interpreter teardown (fast_exit), and the grace ladder.

The grace ladder for a run with a time limit T (each layer gives the one below it
time to stop by itself and write its record before stopping it):

    bench          stops itself at T: SIGTERM to the worker's group, SIGKILL STOP_GRACE_S later;
    the host       (runners.dispatch) stops the launcher or container at T + HOST_GRACE_S;
    a sweep        stops the point's process at T + SWEEP_GRACE_S.

The standard library and psutil (imported where used) only: bench, the launchers and the
sweep all import it, and the launchers must not pull in pydantic for it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, NoReturn

STOP_GRACE_S = 10  # SIGTERM -> SIGKILL when stopping a process group (worker, ranks)
CLIENT_GRACE_S = 20  # a container client forwarding SIGTERM, a sweep point's children: before SIGKILL
HOST_GRACE_S = 60  # beyond T: bench's own stop and the launcher's grace
SWEEP_GRACE_S = 90  # beyond T: the host's grace plus start-up
CLOSE_GRACE_S = 60  # a framework's shutdown (MPI_Finalize) once the measurement is taken, on process 0
PEER_CLOSE_GRACE_S = 90  # the same on the other ranks: longer, so that process 0 gives up first

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


# The signal policy (docs/signals.md): every signal that ends a process by default and that a shell,
# a terminal or a batch system sends. Each ends a run as a record with status 'interrupted', the signal named in
# error.signal and exit code 130 (EXIT_INTERRUPTED, whatever the signal: one code means "stopped from outside,
# recorded"). SIGPIPE and SIGXFSZ are not among them: Python ignores both (a write fails instead).
STOP_SIGNALS = (
    signal.SIGINT,  # Ctrl-C
    signal.SIGTERM,  # kill, scancel, a job's time limit, a launcher or a sweep stopping its ranks
    signal.SIGHUP,  # the terminal is gone (an SSH session dropped): nobody sees the run any more
    signal.SIGQUIT,  # Ctrl-\: a harder Ctrl-C
    signal.SIGXCPU,  # the CPU-time limit (ulimit -t, a batch system's): the kernel kills at the hard limit
)  # stop now: the step in progress is lost, the steps already timed are kept
# Slurm's pre-timeout warning (--signal=[B:]USR1@SECS): the run is ending soon, not now. bench finishes the step in
# progress and stops at its boundary (timing.StepBoundary), keeping every step timed; in a run of several processes,
# which could not agree on one step without a collective in the timed loop, and on benchrun's side, it is a stop now.
BOUNDARY_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
ENDING_SIGNALS = STOP_SIGNALS + BOUNDARY_SIGNALS  # every signal a run, a sweep or a comparison ends on cleanly


def at_boundary(signum: int, world_size: int) -> bool:
    """Whether `signum` stops bench's run of `world_size` processes at the next step boundary (else now)."""
    return signum in BOUNDARY_SIGNALS and world_size == 1


def unhandled(signals=ENDING_SIGNALS) -> tuple[int, ...]:
    """Those of `signals` nobody in this process handles yet (a sweep's point process handles them itself), with
    SIGINT always: its default is Python's KeyboardInterrupt."""
    return tuple(s for s in signals if s == signal.SIGINT or signal.getsignal(s) == signal.SIG_DFL)


_AT_FAST_EXIT: list[Callable[[], None]] = []


def at_fast_exit(cleanup: Callable[[], None]) -> None:
    """What must still run when the worker leaves by fast_exit, which skips atexit: a framework's
    scratch files."""
    _AT_FAST_EXIT.append(cleanup)


def fast_exit(code: int) -> NoReturn:
    """Leave without interpreter teardown, where TensorFlow's remote contexts complain about servers
    that already left and framework finalisers can crash; everything must be written by now."""
    _leaving()
    os._exit(code)


def _leaving() -> None:
    """What every exit without teardown does first (fast_exit, die_of): the at_fast_exit cleanups, the streams."""
    for cleanup in _AT_FAST_EXIT:
        try:
            cleanup()
        except Exception:  # noqa: BLE001 - a cleanup must not change the run's exit code
            pass
    sys.stdout.flush()
    sys.stderr.flush()


class StopScope:
    """While in the block, a stop signal is noted (`received`), handed to `then`, and raised as
    `raise_as(signum)` while armed; the previous handlers come back on exit. `once`: after the first
    raise a signal is only noted (one arriving while the run is being stopped must not cut that short);
    `armed=False` until arm(): a signal that comes before the caller can stop anything is raised there."""

    def __init__(self, raise_as: Callable[[int], BaseException] | None = None, *, signals=STOP_SIGNALS,
                 then: Callable[[int], None] | None = None, once: bool = False, armed: bool = True):
        self.raise_as, self.signals, self.then, self.once, self.armed = raise_as, signals, then, once, armed
        self.received: list[int] = []
        self._previous: dict = {}

    def install(self) -> StopScope:
        self._previous = {signum: signal.signal(signum, self._handle) for signum in self.signals}
        return self

    def restore(self) -> None:
        self.armed = False
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def __enter__(self) -> StopScope:
        return self.install()

    def __exit__(self, *exc) -> None:
        self.restore()

    def _handle(self, signum, _frame) -> None:
        self.received.append(signum)
        if self.then is not None:
            self.then(signum)
        if self.raise_as is not None and self.armed:
            self.armed = not self.once
            raise self.raise_as(signum)

    def arm(self) -> None:
        if self.received and self.raise_as is not None:
            raise self.raise_as(self.received[0])
        self.armed = True


def interrupting() -> StopScope:
    """The host's side of a run (benchrun run, benchrun launch): Ctrl-C and every other ending signal nobody above
    handles (scancel, `docker stop` of a container whose first process it is, a hang-up, Slurm's warning) raise
    KeyboardInterrupt, which stops the ranks (wait_ranks), whose record then says 'interrupted'. A container's first
    process gets no signal it has no handler for: without this, `docker stop` of `benchrun launch` did nothing for
    10 s and then killed every rank, record unwritten."""
    return StopScope(lambda signum: KeyboardInterrupt(), signals=unhandled()).install()


_WAKEUP: list = []  # on_stop_in_thread's sockets: they live as long as the process
_TAKEN: list[int] = []  # on_stop_in_thread's signals


def on_stop_in_thread(signals, action: Callable[[int], None]) -> None:
    """Each of `signals` runs action(signum) in a thread of its own at once, then the process dies of the signal
    (die_of). Python runs a signal's handler in the main thread only, once it is between bytecodes; a rank of
    several processes is often blocked in a collective that will never return (its peers are being stopped too),
    so its handler would never run. The C-level handler still writes the signal's number to the wakeup fd, which
    the thread waits on. The main thread's own handler only notes the signal. Call from the main thread."""
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    _TAKEN.extend(signals)
    retake_stop_signals()
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)

    def wait() -> None:
        while True:
            signum = reader.recv(1)[0]
            if signum in signals:  # the wakeup fd hears of every signal with a Python handler (SIGINT's too)
                try:
                    action(signum)
                finally:
                    die_of(signum)

    threading.Thread(target=wait, name="stop", daemon=True).start()
    _WAKEUP.append((reader, writer))


def retake_stop_signals() -> None:
    """Put on_stop_in_thread's signals back under Python's handler (the one that writes the wakeup fd) where a
    library took them below Python since: TensorFlow's coordination service (MultiWorkerMirroredStrategy) sets a
    SIGTERM handler of its own in C++ for its preemption notifier, and the rank then trained on, its stop unseen,
    until it was killed with nothing kept. A no-op before on_stop_in_thread. Call from the main thread."""
    for signum in _TAKEN:
        signal.signal(signum, lambda received, frame: None)  # the stop's thread acts; the main thread only notes


def die_of(signum: int) -> NoReturn:
    """End this process as `signum` ends it by default, from any thread (signal.signal is the main thread's only:
    libc's signal() is called instead): its supervisor sees a death by that signal, as if nothing had caught it."""
    _leaving()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal(ctypes.c_int(signum), ctypes.c_void_p(0))  # SIG_DFL
        os.kill(os.getpid(), signum)
        time.sleep(5)  # delivered at once to a thread that does not block it
    except (OSError, AttributeError):
        pass
    os._exit(128 + signum)


_EARLY: list[int] = []  # signals noted before a run could take them (note_early)


def note_early(signals) -> None:
    """From bench's first line: `signals` (Slurm's warning, which may come up to 60 s before it was asked for, so
    also while bench loads) are noted, not fatal, until a run's StopScope takes them (take_early)."""
    for signum in signals:
        signal.signal(signum, lambda received, frame: _EARLY.append(received))


def take_early(scope: StopScope) -> None:
    """The signals noted before `scope` was installed that it handles, as if it had received them."""
    for signum in [s for s in _EARLY if s in scope.signals]:
        _EARLY.remove(signum)
        scope.received.append(signum)


def host_deadline(timeout_s: float | None) -> float | None:
    """Seconds after which the host stops a run bench was told to end at timeout_s."""
    return None if timeout_s is None else timeout_s + HOST_GRACE_S


def sweep_deadline(timeout_s: float | None) -> float | None:
    """Seconds after which a sweep stops a point whose runs end at timeout_s."""
    return None if timeout_s is None else timeout_s + SWEEP_GRACE_S


def exit_code(returncode: int | None) -> int:
    """A child's exit code as a shell reports it: 128 + N for signal N; 1 when it never ended."""
    if returncode is None:
        return 1
    return 128 - returncode if returncode < 0 else returncode


def returns_within(call: Callable[[], None], seconds: float | None) -> bool:
    """call() in a daemon thread, waited for up to `seconds` (None: until it returns) while this thread stays
    free for signals (a StopScope's exception is raised here, the call left stuck in a collective): False,
    and the call left running, when it has not returned by then (the process then leaves without it). Its
    exception is raised here. Where no thread can start (an address-space limit just hit: a probe's OOM),
    call() runs here, unbounded."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:  # noqa: BLE001 - raised again in the caller's thread
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    try:
        thread.start()
    except RuntimeError:  # "can't start new thread"
        call()
        return True
    thread.join(seconds)
    if thread.is_alive():
        return False
    if errors:
        raise errors[0]
    return True


def stop_process_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM a process's whole group (its data-loader workers or ranks too), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> bool:
    """Linux: get `sig` when the parent dies, so no orphan keeps a GPU or a port busy.
    False when the parent is already gone (before the request took effect)."""
    _prctl(PR_SET_PDEATHSIG, sig)
    return os.getppid() == parent_pid


def become_subreaper() -> None:
    """Adopt orphaned descendants (ranks a dead launcher left behind) instead of init."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def _process(pid: int):
    import psutil  # lazily: bench --help stays light

    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _live(proc) -> bool:
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE  # a zombie is dead, only waiting to be reaped
    except psutil.Error:
        return False


def alive(pid: int) -> bool:
    proc = _process(pid)
    return proc is not None and _live(proc)


def parent(pid: int) -> int | None:
    import psutil

    proc = _process(pid)
    try:
        return None if proc is None else proc.ppid()
    except psutil.Error:
        return None


def descendants(pid: int | None = None, recursive: bool = True) -> list[int]:
    """Every live descendant of pid (default: this process); only its children if not recursive."""
    import psutil

    proc = _process(os.getpid() if pid is None else pid)
    try:
        found = [] if proc is None else proc.children(recursive=recursive)
    except psutil.Error:
        return []
    return [child.pid for child in found if _live(child)]


def children(pid: int | None = None) -> list[int]:
    """The live children of pid (default: this process)."""
    return descendants(pid, recursive=False)


def command_lines() -> dict[int, list[str]]:
    """Every process's argv (those it may read)."""
    import psutil

    return {proc.pid: proc.info["cmdline"] for proc in psutil.process_iter(["cmdline"]) if proc.info["cmdline"]}


def group_members(pgid: int) -> list[int]:
    """The live processes of process group `pgid`."""
    import psutil

    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and _live(proc):
                members.append(proc.pid)
        except (ProcessLookupError, PermissionError):
            continue
    return members


def signal_all(pids: list[int], sig: int) -> list[int]:
    """The pids signalled (not those gone, nor those not ours: a rootless container's other users)."""
    sent = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            sent.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return sent


def reap() -> None:
    """Collect every child that has ended (a subreaper's adopted orphans included)."""
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                return
        except ChildProcessError:
            return


def kill_descendants() -> None:
    """SIGKILL every descendant, again until none is left (orphans keep arriving to a subreaper)."""
    for _ in range(50):
        left = descendants()
        if not left:
            return
        signal_all(left, signal.SIGKILL)
        time.sleep(0.1)
        reap()


def terminate(pids: list[int], grace_s: float) -> None:
    """SIGTERM pids (each bench records 'interrupted') and wait up to grace_s for them to end."""
    pids = signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)


def stop_descendants(grace_s: float = CLIENT_GRACE_S) -> None:
    """SIGTERM the direct children (bench records 'interrupted'), wait up to grace_s, then kill everything."""
    terminate(children(), grace_s)
    kill_descendants()
