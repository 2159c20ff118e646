"""RunSpec: what was asked of bench — its command and the options given — typed, with no I/O and no environment.

The host (benchrun) hands one across every boundary instead of bench's argv: `from_argv` is the one place bench's
arguments are read on the host, `to_argv` renders them only where a process is started, `replace` sets what the
host decides (--output, --timeout, --num-ps, the mounted data paths) once, and `check` applies the option table's
and the strategies' rules. Inside the image bench reads the same argv with the same parser (`add_arguments`), and
`config` resolves a spec into what runs (ports from the run token, data paths, the installed check).

Only the option table and the comm command's argument list are imported: `bench --help` loads no framework.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .comm import cli as comm_cli
from .core.errors import UsageError, choices
from .distributed import strategies
from .settings import options
from .settings.options import COMM, OPTIONS, RUN


class Parser(argparse.ArgumentParser):
    """bench's parsers: a bad argument is one line (UsageError, exit 2), as every other bad input."""

    def error(self, message: str):
        raise UsageError(message)


def add_arguments(p: argparse.ArgumentParser, environ, given_only: bool = False) -> None:
    """bench's training options (under their headings) and the `comm` subcommand, from options.OPTIONS.
    `given_only`: an option not given is left out of the result (the host's spec keeps what was asked)."""
    groups = {key: p.add_argument_group(title) for key, title in options.GROUPS.items()}
    for option in options.of(RUN):
        option.add_to(groups[option.group], environ, suppress_default=given_only)
    comm_cli.add_parser(p.add_subparsers(dest="command", title="commands"), environ, given_only=given_only)


_PARSER: list[Parser] = []  # built once: a sweep of thousands of points reads many specs; parsing does not change it


def _parser() -> Parser:
    if not _PARSER:
        p = Parser(prog="bench", add_help=False)
        add_arguments(p, environ={}, given_only=True)
        _PARSER.append(p)
    return _PARSER[0]


def _rendered(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class RunSpec:
    """bench's command (`run`, a training run, or `comm`) and the options given, by their option-table name, in
    the order given. An option not given has its table default (`spec.model`): the image's environment (such as
    $BENCH_FRAMEWORK) is the image's, not the host's, so it is never read here."""

    given: dict[str, Any] = field(default_factory=dict)
    command: str = RUN

    @classmethod
    def from_argv(cls, argv: list[str]) -> RunSpec:
        """bench's arguments as bench will read them (one line, UsageError, when they do not parse); help and
        version are left to bench."""
        args = [arg for arg in argv if arg not in ("-h", "--help", "--version")]
        try:
            parsed = vars(_parser().parse_args(args))
        except UsageError as error:
            raise UsageError(f"bench's arguments: {error}") from None
        command = parsed.pop("command", None) or RUN
        order = [option.dest for option in _in_order(args) if option.dest in parsed]
        return cls({dest: parsed[dest] for dest in dict.fromkeys([*order, *parsed])}, command)

    @classmethod
    def of(cls, command: str = RUN, **given) -> RunSpec:
        """A spec from option values (a sweep point's); None leaves an option out, as does False for a flag."""
        spec = cls({}, command)
        return spec.replace(**given)

    def __getattr__(self, name: str) -> Any:
        if name in OPTIONS:
            return self.given.get(name, OPTIONS[name].default)
        raise AttributeError(name)

    def replace(self, **changes) -> RunSpec:
        """The same request with these options set (None, or False for a flag: left out)."""
        given = dict(self.given)
        for name, value in changes.items():
            if name not in OPTIONS:
                raise KeyError(f"bench has no option {name!r}")
            if value is None or (OPTIONS[name].type is bool and value is False):
                given.pop(name, None)
            else:
                given[name] = value  # one given already keeps its place
        return dataclasses.replace(self, given=given)

    def to_argv(self) -> list[str]:
        """bench's arguments for this spec: the training-level options in the order given, then `comm` and its
        own. Rendered only where a process is started (a value parses back to itself: from_argv(to_argv()))."""
        def flags(names) -> list[str]:
            out = []
            for name in names:
                option, value = OPTIONS[name], self.given[name]
                out += [option.flag] if option.type is bool else [option.flag, _rendered(value)]
            return out

        comm_only = [name for name in self.given if OPTIONS[name].commands == (COMM,)]
        top = flags(name for name in self.given if name not in comm_only)
        return top if self.command == RUN else [*top, COMM, *flags(comm_only)]

    def check(self) -> None:
        """Every option's own rule and the strategy's (one line, UsageError); nothing read from the machine."""
        options.check_values(self.given)
        strategy = strategies.STRATEGIES.get(self.strategy)
        if strategy is None:
            return  # an unknown strategy: check_values named it (its choices are the strategies')
        framework = OPTIONS["framework"].resolved(self.framework)
        if framework is not None and not strategy.supports(framework):
            valid = [s.name for s in strategies.STRATEGIES.values() if s.supports(framework)]
            raise UsageError(f"--strategy {strategy.name} is not available for {framework} (choices: {choices(valid)})")

    def arguments(self) -> argparse.Namespace:
        """Every option's value (given, else its default) and the command, as bench's parser gives them:
        what the configuration builders (config.build_config, comm's options_from) read."""
        values = {name: self.given.get(name, option.default) for name, option in OPTIONS.items()}
        return argparse.Namespace(**values, command=None if self.command == RUN else self.command)

    def config(self, installed_here: bool = True):
        """What runs: the training run's BenchConfig or comm's CommOptions, validated (UsageError), with the
        ports the run token places. `installed_here=False`: the framework runs elsewhere (a container), as for
        a record the host writes for a run it lost."""
        if self.command == COMM:
            return comm_cli.options_from(self.arguments(), installed_here=installed_here)
        return config_of(self.arguments(), installed_here=installed_here)

    def to_json(self) -> dict:
        return {"command": self.command, "given": dict(self.given)}

    @classmethod
    def from_json(cls, data: dict) -> RunSpec:
        return cls(dict(data["given"]), data["command"])


def config_of(args: argparse.Namespace, installed_here: bool = True):
    """The run's config from bench's parsed arguments (UsageError when invalid)."""
    from .settings.config import build_config

    values = {o.dest: getattr(args, o.dest) for o in options.CONFIG_OPTIONS}
    return build_config(**values, rendezvous_timeout=args.timeout or options.RENDEZVOUS_TIMEOUT_S,
                        installed_here=installed_here)


def _in_order(args: list[str]):
    """The options named in `args`, in the order they come (--flag and --flag=value; argparse's unambiguous
    prefixes are not used by benchrun, so an unmatched name is skipped: its option still counts, last)."""
    by_flag = {option.flag: option for option in OPTIONS.values()}
    for arg in args:
        option = by_flag.get(arg.split("=", 1)[0]) if arg.startswith("--") else None
        if option is not None:
            yield option
