import os
import sys

EXIT_INTERRUPTED = 130  # benchmarks.errors, not imported yet when Ctrl-C comes while it loads


def leave(code: int) -> None:
    """A KeyboardInterrupt that passed through exec() of a string (dataclasses and pydantic build their
    classes so) makes CPython 3.11 end by SIGINT even though bench caught it: leave now, with the
    documented code. Everything is written by then (records are fsynced; stdio flushed here)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while Python is still loading bench: as any interrupt before the run
    print("bench: interrupted", file=sys.stderr)
    leave(EXIT_INTERRUPTED)

code = main()
if code == EXIT_INTERRUPTED:
    leave(code)
sys.exit(code)
