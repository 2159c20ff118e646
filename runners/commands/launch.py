"""`benchrun launch`: start N ranks of bench through a launcher (the user's text is DESCRIPTION).

A thin CLI over runners.launchers.launch_spec and Launcher.run, which `benchrun run` and sweeps
call in process.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from benchmarks.core.errors import EXIT_INTERRUPTED, UsageError, choices
from benchmarks.core.processes import host_deadline, interrupting
from benchmarks.runspec import RunSpec

from .. import launchers

DESCRIPTION = """\
Start N ranks of bench through a launcher, without a container (benchrun run adds one).

    benchrun launch --launcher local -n 2 -- --framework torch --strategy ddp --model resnet50
    benchrun launch --launcher local -n 2 --num-ps 1 -- --framework tf --strategy ps --model resnet50
    benchrun launch --launcher srun -n 8 -- --framework torch --strategy ddp   (inside an allocation)

`-n` counts training ranks; under `--strategy ps` the chief and the `--num-ps`
parameter servers are extra processes on the same nodes. `--dry-run` prints the
command line and starts nothing.
"""


def add_parser(sub) -> None:
    launch = sub.add_parser("launch", help="start N ranks of bench through a launcher", description=DESCRIPTION,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    launch.add_argument("--launcher", default="local", help=f"{choices(launchers.LAUNCHERS)} (default: local)")
    launch.add_argument("-n", "--num-workers", type=int, default=1, help="training ranks (default: 1)")
    launch.add_argument("--num-ps", type=int, default=0, help="parameter servers (--strategy ps), passed on to bench")
    launch.add_argument("--hosts", default="", help="comma-separated hosts (default: this machine)")
    launch.add_argument("--timeout", type=float, help="seconds for the whole run; passed on to bench as well")
    launch.add_argument(
        "--bench-command",
        default=f"{shlex.quote(sys.executable)} -m benchmarks",
        help="how ranks start bench (default: this Python's benchmarks package; 'bench' inside images)",
    )
    launch.add_argument("--launcher-arg", action="append", default=[], help="extra launcher option (repeatable)")
    launch.add_argument("--dry-run", action="store_true", help="print the launcher command, after the run token its "
                        "ranks get (DLBENCH_RUN_TOKEN=...), and exit")
    launch.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then bench's own arguments")
    launch.set_defaults(run=run)


def launch_spec(args) -> launchers.LaunchSpec:
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    try:
        bench = shlex.split(args.bench_command)
    except ValueError as error:  # "No closing quotation"
        raise UsageError(f"--bench-command {args.bench_command!r}: {error}") from None
    return launchers.launch_spec(bench, RunSpec.from_argv(bench_args), args.num_workers, args.num_ps,
                                 args.timeout, [h for h in args.hosts.split(",") if h], args.launcher_arg)


def run(args) -> int:
    launcher = launchers.get(args.launcher)
    spec = launch_spec(args)
    launcher.require()
    if args.dry_run:
        print(shlex.join(launcher.typed(spec)))
        return 0
    stop = interrupting()  # the ranks are stopped and recorded, not left running when benchrun goes
    try:
        code = launcher.run(spec, timeout_s=host_deadline(args.timeout))
    finally:
        stop.restore()
    # After a stop, whatever the launcher makes of its ranks' ends: horovodrun's and mpirun's 1, Hydra's 0 or 130 by
    # which rank ended first (a stopped rank but 0 exits 0: docs/signals.md). benchrun run reads process 0's record
    # for its code; here, where the record may be anywhere, being stopped from outside is the run's end.
    return EXIT_INTERRUPTED if stop.received else code
