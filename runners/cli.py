"""`benchrun`: host-side dispatch of `bench` (launchers, runtimes, sweeps, reports).

Each subcommand is one module in runners/commands with `add_parser(sub)`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from benchmarks.errors import EXIT_USAGE, UsageError

COMMANDS = ["launch", "run", "sweep", "compare-runtimes", "report", "compare", "export"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="benchrun", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"runners.commands.{name.replace('-', '_')}").add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(sys.argv[1:] if argv is None else argv)
        return args.run(args)
    except (UsageError, ValueError) as error:  # ValueError: a launcher or runtime refusing a combination
        print(f"benchrun: error: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
