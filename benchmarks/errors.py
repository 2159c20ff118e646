"""Exit codes and the one exception type that means "the user asked for something invalid".

Exit codes are part of the documented interface (README, "Exit codes"): runners
and sweeps branch on them, so they never change meaning.
"""

EXIT_OK = 0
EXIT_FAILED = 1  # the run crashed; a record with status "failed" was written
EXIT_USAGE = 2  # bad input; nothing was run and nothing was written
EXIT_OOM = 3  # device or host out of memory; a record with status "oom" was written
EXIT_TIMEOUT = 4  # --timeout expired; a record with status "timeout" was written
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGTERM; a record with status "interrupted" was written

EXIT_CODE_BY_STATUS = {
    "ok": EXIT_OK,
    "failed": EXIT_FAILED,
    "oom": EXIT_OOM,
    "timeout": EXIT_TIMEOUT,
    "interrupted": EXIT_INTERRUPTED,
}


class UsageError(Exception):
    """Invalid input: reported as one line `bench: error: ...` with exit code 2."""


def choices(values) -> str:
    return ", ".join(str(v) for v in values)
