"""The commands `bench` and `benchrun`, as pyproject's console scripts and `python -m` start them.

Only those import this module, and importing it is what makes an early Ctrl-C safe: from its first
line a SIGINT is noted, not raised, until main_entry has loaded the CLI module, so that a Ctrl-C between
the script's import and its call to bench()/benchrun() is no KeyboardInterrupt traceback. Also
where SIGINT came ignored (a script's background job: `benchrun ... &`): Python would leave it
ignored while loading, and the runs take it later anyway (processes.StopScope).
"""

import signal

_interrupted: list[int] = []
signal.signal(signal.SIGINT, lambda signum, frame: _interrupted.append(signum))

import os  # noqa: E402  (the handler first)
import sys  # noqa: E402 - the signal handler is installed before anything else loads

from .core.errors import EXIT_INTERRUPTED  # noqa: E402 - see above


def main_entry(prog: str, cli_module: str) -> None:
    """Load the CLI, run its main(), exit with its code.

    The CLI module (benchrun's imports its commands: pydantic, numpy) loads with SIGINT still noted: a
    KeyboardInterrupt raised inside an extension module's import can come out as another error
    (pydantic-core's Rust init panics). One that still does, later, is the Ctrl-C it came from.
    Exit 130 is left through os._exit: a KeyboardInterrupt that passed through exec() of a string
    (dataclasses and pydantic build their classes so) makes CPython 3.11 end by SIGINT even when it
    was caught. Everything is written by then (records fsynced; stdio flushed here)."""
    try:
        import importlib

        main = importlib.import_module(cli_module).main
        signal.signal(signal.SIGINT, _interrupt)
        if _interrupted:
            raise KeyboardInterrupt
        code = main()
    except BaseException:  # re-raised unless a Ctrl-C caused it
        if not _interrupted:
            raise
        print(f"{prog}: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    if code == EXIT_INTERRUPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _interrupt(signum, frame):
    _interrupted.append(signum)
    raise KeyboardInterrupt


def bench() -> None:
    from .core.processes import BOUNDARY_SIGNALS, note_early

    note_early(BOUNDARY_SIGNALS)
    main_entry("bench", "benchmarks.cli")


def benchrun() -> None:
    main_entry("benchrun", "runners.cli")
