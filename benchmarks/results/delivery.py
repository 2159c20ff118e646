"""Process 0's record, delivered: to --output (or the fallback file), on the terminal, as JSON.

Shared by training runs and `bench comm`; a measurement, once taken, is never lost.
"""

from __future__ import annotations

import json
import os
import sys

from ..core.errors import EXIT_OUTPUT

CLOSED = "was closed by its reader"  # why stdout did not take the record, when its reader has gone


def deliver(result: dict, output_path: str | None, as_json: bool, render) -> int | None:
    """Process 0's record: appended to --output (or the fallback file), rendered, printed as JSON
    with --json or when it could not be written. EXIT_OUTPUT when it could not; None otherwise.
    A stdout that takes no more loses nothing: its reader gone (`bench --json | head -c1`), or a file on a
    full file system (`bench > log`, compare-runtimes' run logs): the record is in --output or, where stdout
    was to carry it (--json, or no --output), in the fallback file the one line names."""
    from ..core.durable import OutputError, append_or_fallback, fallback

    fallback_name = f"dlbench-record-{result['run_id']}.jsonl"
    lost = None
    if output_path:
        try:
            append_or_fallback(output_path, result, fallback_name)
        except OutputError as error:
            lost = error
    failure = _to_stdout(render)
    if failure is None and (as_json or lost is not None):
        failure = _to_stdout(lambda: sys.stdout.write(json.dumps(result) + "\n"))
    if lost is not None:
        saved = f"saved to {lost.fallback}" if lost.fallback else "the temp dir is not writable either"
        printed = " and printed on stdout as JSON" if failure is None else f" (stdout {failure}: not printed)"
        print(f"bench: error: --output: {lost}: the record is {saved}{printed}", file=sys.stderr, flush=True)
        return EXIT_OUTPUT
    if failure is None or (failure == CLOSED and not as_json):
        return None  # shown; or a reader that left before the table: it chose not to read it
    if output_path:
        print(f"bench: warning: stdout {failure}; the record is in {output_path}", file=sys.stderr, flush=True)
        return None
    saved = fallback(result, fallback_name)
    where = f"saved to {saved}" if saved else "the temp dir is not writable either: it is lost"
    print(f"bench: error: stdout {failure} before the record was printed; the record is {where}",
          file=sys.stderr, flush=True)
    return EXIT_OUTPUT


def _to_stdout(write) -> str | None:
    """Run `write` (to stdout); why stdout did not take it (None: it did), stdout then pointed at /dev/null
    so that Python's exit flush does not fail again."""
    from ..core.durable import no_room

    try:
        write()
        sys.stdout.flush()
        return None
    except (BrokenPipeError, ConnectionResetError):
        failure = CLOSED
    except OSError as error:
        if not no_room(error):
            raise
        failure = f"is a file its file system will not take ({os.strerror(error.errno).lower()})"
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return failure
