"""Process 0's record, delivered: to --output (or the fallback file), on the terminal, as JSON.

Shared by training runs and `bench comm`; a measurement, once taken, is never lost.
"""

from __future__ import annotations

import json
import os
import sys

from .errors import EXIT_OUTPUT


def deliver(result: dict, output_path: str | None, as_json: bool, render) -> int | None:
    """Process 0's record: appended to --output (or the fallback file), rendered, printed as JSON
    with --json or when it could not be written. EXIT_OUTPUT when it could not; None otherwise.
    A stdout whose reader has gone (`bench --json | head -c1`) loses nothing: the record is in
    --output or, without one, in the fallback file the one line names."""
    from .durable import OutputError, append_or_fallback, fallback

    fallback_name = f"dlbench-record-{result['run_id']}.jsonl"
    lost = None
    if output_path:
        try:
            append_or_fallback(output_path, result, fallback_name)
        except OutputError as error:
            lost = error
    shown = _to_stdout(render)
    if shown and (as_json or lost is not None):
        shown = _to_stdout(lambda: sys.stdout.write(json.dumps(result) + "\n"))
    if lost is not None:
        saved = f"saved to {lost.fallback}" if lost.fallback else "the temp dir is not writable either"
        printed = " and printed on stdout as JSON" if shown else " (stdout is closed: not printed)"
        print(f"bench: error: --output: {lost}: the record is {saved}{printed}", file=sys.stderr, flush=True)
        return EXIT_OUTPUT
    if not shown and as_json:
        if output_path:
            print(f"bench: warning: stdout was closed by its reader; the record is in {output_path}",
                  file=sys.stderr, flush=True)
            return None
        saved = fallback(result, fallback_name)
        where = f"saved to {saved}" if saved else "the temp dir is not writable either: it is lost"
        print(f"bench: error: stdout was closed by its reader before the JSON record was printed; the record is {where}",
              file=sys.stderr, flush=True)
        return EXIT_OUTPUT
    return None


def _to_stdout(write) -> bool:
    """Run `write` (to stdout); False when stdout's reader has gone, stdout then pointed at /dev/null
    so that Python's exit flush does not fail again."""
    try:
        write()
        sys.stdout.flush()
        return True
    except (BrokenPipeError, ConnectionResetError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return False
