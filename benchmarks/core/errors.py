"""Exit codes and the one exception type that means "the user asked for something invalid".

Exit codes are part of the documented interface (docs/bench.md, "Exit codes"): runners
and sweeps branch on them, so they never change meaning.
"""

from __future__ import annotations

import os
import signal
import sys

EXIT_OK = 0
EXIT_FAILED = 1  # the run crashed; a record with status "failed" was written
EXIT_USAGE = 2  # bad input; nothing was run and nothing was written
EXIT_OOM = 3  # device or host out of memory; a record with status "oom" was written
EXIT_TIMEOUT = 4  # --timeout expired; a record with status "timeout" was written
# the record could not be written where asked; it was saved to the fallback the error names. Also an output made whole
# or not at all (make-dataset's DIR, a report, an export) that the file system would not take: nothing of it is left
EXIT_OUTPUT = 5
# benchrun: the environment ended the run (container daemon gone, node failed; record status "failed"),
# or an MLflow tracking store is unreachable or refused a write
EXIT_ENVIRONMENT = 6
EXIT_INTERNAL = 70  # a bug in dlbench (EX_SOFTWARE): one line and the path of the full traceback
EXIT_INTERRUPTED = 130  # stopped by any signal of processes.ENDING_SIGNALS; a record "interrupted" was written

EXIT_CODE_BY_STATUS = {
    "ok": EXIT_OK,
    "failed": EXIT_FAILED,
    "oom": EXIT_OOM,
    "timeout": EXIT_TIMEOUT,
    "interrupted": EXIT_INTERRUPTED,
}


class UsageError(Exception):
    """Invalid input: reported as one line `bench: error: ...` with exit code 2."""


class Stopped(BaseException):
    """A run stopped from outside (a signal): its record keeps what was measured, with this status. A BaseException,
    like KeyboardInterrupt: raised by a signal handler anywhere, also inside a library's `except Exception` (an
    optional import tried while torch loads), which must not swallow it and let the run go on."""

    def __init__(self, status: str, message: str, signal: str | None = None):
        super().__init__(message)
        self.status, self.message, self.signal = status, message, signal
        self.loop = None  # the timed loop it cut short, as far as it went (timing.run_steps), or None

    @classmethod
    def by(cls, signum: int) -> Stopped:
        """What a stop signal (processes.STOP_SIGNALS) raises where a measurement keeps its results so far."""
        name = signal.Signals(signum).name
        return cls("interrupted", f"stopped by {name}", name)


def debug_enabled(argv=()) -> bool:
    """Tracebacks for users only on request: --debug or DLBENCH_DEBUG=1."""
    return "--debug" in argv or os.environ.get("DLBENCH_DEBUG", "") not in ("", "0")


def report_internal_error(prog: str, error: BaseException) -> int:
    """An unexpected exception: one line naming the log that holds the traceback (EXIT_INTERNAL)."""
    import tempfile
    import time
    import traceback

    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        fd, log = tempfile.mkstemp(prefix=f"{prog}-error-{time.strftime('%Y%m%dT%H%M%S')}-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        where = f"full traceback in {log}"
    except OSError:
        where = "no log could be written to the temp dir"
    message = str(error).splitlines()[0] if str(error).strip() else ""
    print(f"{prog}: internal error: {type(error).__name__}: {message[:300]} ({where}; "
          f"rerun with --debug or DLBENCH_DEBUG=1 to see it here)", file=sys.stderr, flush=True)
    return EXIT_INTERNAL


def check_working_directory() -> None:
    """A working directory deleted under the shell: native libraries (oneMKL) abort in it later,
    without a word, so it is refused first (UsageError)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise UsageError("the working directory no longer exists (deleted while the shell was in it): "
                         "cd to one that does") from None


def choices(values) -> str:
    return ", ".join(str(v) for v in values)
