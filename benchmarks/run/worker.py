"""The measuring process: `python -m benchmarks.run.worker SPEC.json`.

It runs apart from `bench` itself so that a run killed by the kernel's OOM
killer, an abort in native code or a timeout still ends as a written record
(the supervisor writes it from outside). It dies with its parent.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import tempfile
import threading
import traceback
from pathlib import Path

from ..core.errors import EXIT_CODE_BY_STATUS, EXIT_USAGE, Stopped, UsageError, debug_enabled
from ..core.processes import STOP_SIGNALS, StopScope, die_with_parent, fast_exit, on_stop_in_thread
from ..core.registry import load_target
from ..distributed import world as worlds
from ..measure.timing import boundary
from . import rank_steps

STACKS_SIGNAL = signal.SIGUSR1  # every thread's Python stack to stderr (relayed by bench), the run goes on
# The supervisor's "stop at the next step boundary" (it got processes.BOUNDARY_SIGNALS, in a run of one process).
# Not SIGUSR1, which is the stacks': Slurm may signal every process of a step, and a stack dump stops nothing.
BOUNDARY_SIGNAL = signal.SIGUSR2


def _warned_by(spec: dict, signum: int) -> str:
    """The signal Slurm's warning came as: the supervisor's note of it, else the one this process got."""
    try:
        return json.loads(Path(spec["warning_path"]).read_text())["signal"]
    except (OSError, ValueError, KeyError):
        return signal.Signals(signum).name


def first_line(error: BaseException) -> str:
    """The informative line of an error; TF/Keras wrap the cause after a 'in user code:' header."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if lines[-1] != lines[0] and any(text.startswith("Original Traceback") for text in lines):
        return lines[-1][:500]  # torch re-raises a DataLoader worker's error: its last line is the cause
    line = lines[0]
    if line.endswith(":") and len(lines) > 1:
        line = next((text for text in reversed(lines) if not text.startswith("File ")), lines[-1])
    return f"{type(error).__name__}: {line[:500]}"


def show_crash(error: BaseException) -> None:
    """The traceback of a crashed run: on stderr with --debug, else in a log that one line names."""
    if debug_enabled():
        traceback.print_exc()
        return
    try:
        fd, log = tempfile.mkstemp(prefix="bench-crash-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            traceback.print_exc(file=f)
        where = f"traceback in {log}; --debug shows it here"
    except OSError:
        where = "--debug shows the traceback"
    print(f"bench: run failed: {first_line(error)} ({where})", file=sys.stderr, flush=True)


def write_json(path: str, value) -> None:
    """Whole or not at all: the supervisor may read it at any moment, and two threads may write it at
    once (a peer's failure beside the main thread's record), so each writes a partial file of its own."""
    target = Path(path)
    fd, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(value))
    os.replace(partial, target)


def main(spec_path: str) -> int:
    faulthandler.register(STACKS_SIGNAL, all_threads=True)  # `kill -USR1 WORKER` shows where a hung run waits
    spec = json.loads(Path(spec_path).read_text())
    if not die_with_parent(spec["parent_pid"]):  # the supervisor is already gone
        fast_exit(1)
    # The measurement is imported here, not at module top, so a broken framework
    # install is reported as a failed run rather than an import traceback.
    kind = load_target(spec["measurement"])
    # A run of one process keeps what it has timed: a stop signal (the supervisor's SIGTERM, which says why in its
    # stop file; SIGXCPU at this process's own CPU limit) is raised as Stopped once the measurement can keep it,
    # noted until then, and only noted after the first, so that the record is written whole. So does the chief of a
    # strategy whose chief times every worker itself (--strategy ps): it waits on the coordinator, in no collective,
    # and has every step (kind.unwinds). Another rank of several cannot unwind (it may be blocked in a collective its
    # stopped peers never join): it writes the steps it has timed from a thread of its own, for process 0's
    # supervisor to total (rank_steps), and ends as the signal says.
    world = worlds.detect()
    single = kind.unwinds(spec, world)
    stop = StopScope(Stopped.by, signals=STOP_SIGNALS if single else (), once=True, armed=False).install()
    if single:
        StopScope(signals=(BOUNDARY_SIGNAL,), then=lambda signum: boundary.request(_warned_by(spec, signum))).install()
    stopping = threading.Event()  # a rank of several: its stop has come; the outcome is its supervisor's now

    def peer_failed(record: dict) -> None:
        # Called from the rendezvous thread while the main thread may be stuck in a
        # collective with the dead rank: write the record and leave at once.
        if stopping.is_set():  # a peer stopped with this run: process 0's supervisor records the stop itself
            return
        if stop.received:  # a peer stopped with the chief that unwinds (measures_alone): its own record says so
            return
        write_json(spec["result_path"], {"record": record})
        sys.stderr.write(f"bench: {record['error']['message']}\n")
        fast_exit(EXIT_CODE_BY_STATUS[record["status"]])

    def ranks_silent(silent: dict) -> None:
        try:
            write_json(spec["silence_path"], silent)
        except OSError:
            pass  # only a hint for the supervisor's message if it stops the run: the run goes on

    measurement = kind.from_spec(spec, peer_failed, ranks_silent)
    if not single and spec.get("steps_path"):
        def keep_steps(signum: int) -> None:
            stopping.set()
            me = measurement.peers[world.rank] if world.rank < len(measurement.peers) else {}
            steps = rank_steps.payload(world.rank, measurement.host, me.get("role", {"kind": "worker", "index": world.rank}),
                                       measurement.kept_so_far(), signal.Signals(signum).name)
            rendezvous = measurement.rendezvous  # None: stopped before the ranks met
            if world.rank and rendezvous is not None and rendezvous.hand_over(steps):  # to process 0, on any host
                return
            rank_steps.keep(spec["steps_path"], steps)  # process 0's own; another's that could not be handed over
            if not world.rank and rendezvous is not None:
                rank_steps.receive(rendezvous, Path(spec["steps_path"]).parent, world.size)

        on_stop_in_thread(STOP_SIGNALS, keep_steps)
    try:
        stop.arm()
        result = measurement.run()
    except UsageError as error:
        print(f"bench: error: {error}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except BaseException as error:  # noqa: BLE001 - every failure must become a record
        if stopping.is_set():  # what the stop caused (a peer gone from the collective): the stop's thread ends this
            threading.Event().wait()  # process once its steps are written, and the supervisor records the stop
        backend = measurement.backend
        if stop.received or isinstance(error, Stopped):  # also what the stop caused first (a DataLoader's worker gone)
            stopped = Path(spec["stop_path"])  # the supervisor's says why (the signal it got, or --timeout)
            why = Stopped.by(stop.received[0]) if stop.received else error
            why = json.loads(stopped.read_text()) if stopped.exists() else {
                "status": why.status, "error": {"kind": why.status, "message": why.message, "signal": why.signal}}
            result = measurement.finish(why["status"], why["error"])
        elif isinstance(error, MemoryError) or (backend is not None and backend.is_out_of_memory(error)):
            message = first_line(error)
            print(f"bench: out of memory: {message}", file=sys.stderr, flush=True)
            result = measurement.failure("oom", "oom", message)
        elif isinstance(error, KeyboardInterrupt):
            result = measurement.failure("interrupted", "interrupted", "interrupted")
        else:
            show_crash(error)
            result = measurement.failure("failed", "crash", first_line(error))
    write_json(spec["result_path"], {"record": result})  # null: a rank other than 0 that finished its part
    return EXIT_CODE_BY_STATUS[result["status"]] if result else 0


if __name__ == "__main__":
    fast_exit(main(sys.argv[1]))
