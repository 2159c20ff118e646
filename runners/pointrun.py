"""One sweep point in its own process, so that nothing it started outlives the sweep.

    python -m runners.pointrun SWEEP_PID OUTCOME_FD  (the RunRequest as JSON on stdin)

A child subreaper (PR_SET_CHILD_SUBREAPER): rank processes in their own sessions are adopted here, not by
init, when their launcher dies. It dies with the sweep (PR_SET_PDEATHSIG, even on `kill -9`): on SIGTERM
it asks its children to stop (bench records 'interrupted'), then, after the run's stop grace
(dispatch.stop_grace_s), kills every descendant, as it always does before it exits. It writes
runners.dispatch.run's Outcome as JSON to OUTCOME_FD; bench's output goes to the sweep's per-point log.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from benchmarks.core.errors import UsageError
from benchmarks.core.processes import (
    CLIENT_GRACE_S,
    ENDING_SIGNALS,
    StopScope,
    become_subreaper,
    die_with_parent,
    kill_descendants,
    stop_descendants,
)


def main(argv: list[str]) -> int:
    sweep_pid, outcome_fd = int(argv[0]), int(argv[1])
    os.set_inheritable(outcome_fd, False)  # bench must not hold the sweep's pipe open
    become_subreaper()
    # For the process's life: SIGTERM (the sweep is going, or is gone), and any other ending signal (a hang-up of
    # the sweep's terminal reaches this process too), stops the direct children gently, then everything; Ctrl-C is
    # only noted: bench records 'interrupted', and we wait for it.
    grace_s = [CLIENT_GRACE_S]  # until the request says which runtime runs it
    StopScope(signals=tuple(s for s in ENDING_SIGNALS if s != signal.SIGINT),
              then=lambda signum: stop_descendants(grace_s[0])).install()
    StopScope(signals=(signal.SIGINT,)).install()
    if not die_with_parent(sweep_pid, signal.SIGTERM):  # the sweep died before the death signal was armed
        return 1
    from .dispatch import RunRequest, request_stop_grace_s, run

    request = RunRequest.from_json(json.load(sys.stdin))
    try:
        try:
            grace_s[0] = request_stop_grace_s(request)
            outcome = run(request)
            result = {"record": outcome.record, "exit_code": outcome.exit_code, "command": outcome.command,
                      "error": outcome.fault if outcome.record is None else None}
        except UsageError as error:  # dispatch refusing the request (runtime not available, ...)
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
