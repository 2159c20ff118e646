"""`benchrun`: host-side dispatch of `bench` (launchers, runtimes, sweeps, reports). Its user text,
the `--help`, is DESCRIPTION below.

Each subcommand is one module in runners/commands with `add_parser(sub)`. They are imported with this
module, which benchmarks.entry loads while a Ctrl-C is only noted (entry.py says why).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from benchmarks.core.durable import NoRoom, OutputError
from benchmarks.core.errors import (
    EXIT_ENVIRONMENT,
    EXIT_INTERRUPTED,
    EXIT_OUTPUT,
    EXIT_USAGE,
    UsageError,
    check_working_directory,
    debug_enabled,
    report_internal_error,
)

from .mlflow_export import TrackingError

DESCRIPTION = """\
Run bench on this machine's container runtimes and launchers, sweep configurations, and turn the
records into reports.

  benchrun run --runtime docker -- --framework tensorflow --model resnet50    one run in a container
  benchrun launch --launcher srun -n 4 -- --framework torch --strategy ddp    N ranks through a launcher
  benchrun compare-runtimes --runtimes local,docker,apptainer --rounds 5 --out DIR -- --model resnet50
                                                                             what each runtime costs, with verdicts
  benchrun sweep plan.yaml                                                   a resumable grid into one store
  benchrun report results/*.jsonl --out report/                              tables and plots

`benchrun COMMAND --help` says more about each; the docs list every flag and record field.
"""

COMMANDS = {name: importlib.import_module(f"runners.commands.{name.replace('-', '_')}")
            for name in ["info", "launch", "run", "sweep", "compare-runtimes", "report", "compare", "export"]}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="benchrun", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true", help="show Python tracebacks of internal errors (also DLBENCH_DEBUG=1)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS.values():
        command.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("benchrun: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(argv: list[str]) -> int:
    try:
        check_working_directory()
        args = parser().parse_args(argv)
        return args.run(args)
    except UsageError as error:  # a refusal says so; any other exception is a bug (below), never "bad input"
        print(f"benchrun: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OutputError as error:
        saved = f"saved to {error.fallback}" if error.fallback else "the temp dir is not writable either"
        print(f"benchrun: error: {error}: the entry is {saved}", file=sys.stderr)
        return EXIT_OUTPUT
    except NoRoom as error:  # an output (a report, an export) the file system would not take; nothing left of it
        print(f"benchrun: error: {error}", file=sys.stderr)
        return EXIT_OUTPUT
    except TrackingError as error:  # an MLflow tracking store unreachable or refusing a write
        print(f"benchrun: error: {error}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    except Exception as error:  # a bug: one line and a log, unless --debug
        if debug_enabled(argv[:argv.index("--")] if "--" in argv else argv):
            raise
        return report_internal_error("benchrun", error)


if __name__ == "__main__":
    sys.exit(main())
