"""One sweep point in its own process, so that nothing it started outlives the sweep.

    python -m runners.pointrun SWEEP_PID OUTCOME_FD  (the RunRequest as JSON on stdin)

It is a child subreaper (PR_SET_CHILD_SUBREAPER): rank processes that a
launcher starts in their own sessions, and that would otherwise be adopted
by init when the launcher dies, are adopted by this process instead. It
dies with the sweep (PR_SET_PDEATHSIG, even on `kill -9` of the sweep): on
SIGTERM it asks its children to stop (bench records 'interrupted'), then
after GRACE_S kills every descendant. Before it exits it kills whatever is
left, always. It calls runners.dispatch.run and writes the Outcome as JSON
to OUTCOME_FD; bench's own output goes to this process's stdout/stderr
(the sweep's per-point log file).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 20


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: no subreaper, no death signal
        pass


def descendants(pid: int | None = None) -> list[int]:
    """Every live descendant of pid (default: this process), from /proc."""
    pid = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[0] == b"Z":  # zombie: already dead, only waiting to be reaped
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _reap() -> None:
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                return
        except ChildProcessError:
            return


def kill_descendants() -> None:
    """SIGKILL every descendant, again until none is left (orphans keep arriving as we are the subreaper)."""
    for _ in range(50):
        left = descendants()
        if not left:
            return
        _signal_all(left, signal.SIGKILL)
        time.sleep(0.1)
        _reap()


def _on_term(signum, frame) -> None:
    # The sweep is going (or is gone): stop the direct children gently, then everything.
    direct = [pid for pid in descendants() if _parent(pid) == os.getpid()]
    _signal_all(direct, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(_alive(pid) for pid in direct):
        time.sleep(0.1)
    kill_descendants()


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rfind(b")") + 2:].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:].split()[0] != b"Z"


def main(argv: list[str]) -> int:
    sweep_pid, outcome_fd = int(argv[0]), int(argv[1])
    os.set_inheritable(outcome_fd, False)  # bench must not hold the sweep's pipe open
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, lambda signum, frame: None)  # Ctrl-C: bench records 'interrupted'; we wait for it
    if os.getppid() != sweep_pid:  # the sweep died before the death signal was armed
        return 1
    from .dispatch import RunRequest, run

    request = RunRequest(**json.load(sys.stdin))
    try:
        try:
            outcome = run(request, quiet=False)
            result = {"record": outcome.record, "exit_code": outcome.exit_code, "command": outcome.command, "error": None}
        except ValueError as error:  # dispatch refusing the request (runtime not available, ...)
            result = {"record": None, "exit_code": 2, "command": [], "error": str(error).splitlines()[0]}
        sys.stdout.flush()
        sys.stderr.flush()
        with os.fdopen(outcome_fd, "w") as out:
            out.write(json.dumps(result))
    except BrokenPipeError:  # the sweep is gone; nobody to tell
        pass
    finally:
        kill_descendants()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
