"""`benchrun run`: one benchmark under a container runtime (and optionally a launcher); prints its record.

    benchrun run --runtime docker -- --framework tensorflow --model resnet50 --image-size 64 --batch-size 4
    benchrun run --runtime docker --launcher srun -n 2 -- --framework tf --strategy allreduce ...

`--image` defaults to the framework's image from `make images` (dlbench-torch:latest /
dlbench-tensorflow:latest, by bench's --framework). The record is read back from a
fresh results directory mounted at /results, printed as one JSON line, and kept in
--results DIR/records.jsonl when --results is given.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from benchmarks.core.durable import append_or_fallback, check_dir
from benchmarks.core.errors import EXIT_ENVIRONMENT, EXIT_FAILED, EXIT_USAGE, UsageError, choices
from benchmarks.runspec import RunSpec
from benchmarks.settings.options import OPTIONS

from .. import dispatch, launchers, runtimes


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run one benchmark under a container runtime", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_runtime_options(p)
    p.add_argument("--runtime", default=runtimes.DEFAULT, help=f"{choices(runtimes.RUNTIMES)} (default: {runtimes.DEFAULT})")
    p.add_argument("--results", help="directory that keeps records.jsonl (default: print only)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the runtime's own command (as a user would type it) and exit; no image preparation; "
                        "where the runtime is not installed a note on stderr says so and the command is still printed")
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then bench's own arguments")
    p.set_defaults(run=run)


def add_runtime_options(p) -> None:
    """Options `run` and `compare-runtimes` share."""
    p.add_argument("--image", help="image (default: the framework's dlbench image)")
    p.add_argument("--launcher", help=f"{choices(launchers.LAUNCHERS)} (default: none, one process)")
    p.add_argument("-n", "--num-workers", type=int, default=1, help="ranks under --launcher (default: 1)")
    p.add_argument("--num-ps", type=int, default=0, help="parameter servers (--strategy ps)")
    p.add_argument("--launcher-arg", action="append", default=[], help="extra launcher option (repeatable)")
    p.add_argument("--data-dir", help="host ImageFolder directory, mounted read-only; bench gets --data-dir")
    p.add_argument("--timeout", type=float, help="seconds; bench stops itself, the host removes what is left")
    p.add_argument("--gpus", action="store_true", help="give the container the GPUs (--gpus all, --nv, ...)")
    p.add_argument("--mpi", action="store_true", help="the runtime's host-MPI hook (sarus/shifter-ng --mpi, shifter "
                                                      "--module=mpich, podman-hpc --mpi: one shared container per node)")
    p.add_argument("--container-option", action="append", default=[], metavar="[RUNTIME:]--FLAG[=VALUE]",
                   help="an option for the runtime's own command line (docker, podman, podman-hpc), e.g. "
                        "--container-option=--shm-size=64m or docker:--cpus=1 for one runtime of a comparison; "
                        "privileges, mounts, the name and the network are refused (repeatable)")
    p.add_argument("--edf-annotation", action="append", default=[], metavar="KEY=VALUE",
                   help="cscs-ce: an [annotations] entry of the run's EDF, e.g. com.hooks.cxi.enabled=true (repeatable)")


def bench_spec(args) -> RunSpec:
    """What the command line after `--` asks of bench (benchrun writes the record where it reads it back)."""
    asked = RunSpec.from_argv(args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args)
    for own in ("output", "json"):
        if own in asked.given:
            raise UsageError(f"benchrun sets bench's {OPTIONS[own].flag} itself: leave it out")
    return asked


def container_option(item: str) -> tuple[str, str]:
    """--container-option's value as (the runtime it is for, "" for every one; the option)."""
    target, sep, option = ("", "", item) if item.startswith("-") else item.partition(":")
    if not option.startswith("-"):
        raise UsageError(f"--container-option {item!r}: expected --FLAG[=VALUE] or RUNTIME:--FLAG[=VALUE]")
    return target, option


def check_option_targets(args, names) -> None:
    """A --container-option for one runtime must name a runtime the command runs (else it would be dropped)."""
    for item in args.container_option:
        target, _ = container_option(item)
        if target and target not in names:
            raise UsageError(f"--container-option {item!r} is for runtime {target!r}, which this command does not "
                             f"run ({', '.join(names)})")


def request(args, runtime: str) -> dispatch.RunRequest:
    if args.num_workers < 1:
        raise UsageError(f"-n must be 1 or more, got {args.num_workers}")
    if args.num_workers > 1 and args.launcher is None:
        raise UsageError("-n above 1 needs --launcher")
    if args.data_dir is not None and not os.path.isdir(args.data_dir):
        raise UsageError(f"--data-dir {args.data_dir} is not a directory")
    if args.image is not None:
        runtimes.base.check_image(args.image)
    annotations = {}
    for item in args.edf_annotation:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--edf-annotation {item!r}: expected KEY=VALUE")
        annotations[key] = value
    options = [option for target, option in map(container_option, args.container_option) if target in ("", runtime)]
    return dispatch.RunRequest(bench_spec(args), runtime=runtime, image=args.image, launcher=args.launcher,
                               num_workers=args.num_workers, num_ps=args.num_ps, timeout_s=args.timeout,
                               launcher_args=args.launcher_arg, data_dir=args.data_dir, gpus=args.gpus, mpi=args.mpi,
                               edf_annotations=annotations, container_options=options)


def run(args) -> int:
    check_option_targets(args, [args.runtime])
    req = request(args, args.runtime)
    if args.dry_run:
        dispatch.check(req, installed=False)
        for absent in dispatch.missing(req):  # the command is shown all the same: a job prepared elsewhere
            print(f"benchrun: note: {absent}; the command is shown, not run", file=sys.stderr, flush=True)
        print(dispatch.dry_run_text(req, args.results), end="")
        return 0
    if args.results:
        check_dir(args.results, "--results")
    legacy = dispatch.check(req).legacy  # noted once the input is known good (errors stay one line)
    if legacy:
        print(f"benchrun: note: runtime {req.runtime!r} is legacy: {legacy}", file=sys.stderr, flush=True)
    outcome = dispatch.run(req)
    if outcome.record is None:
        if outcome.fault:
            print(f"benchrun: error: the run failed: {outcome.fault}; no record could be made", file=sys.stderr, flush=True)
            return EXIT_ENVIRONMENT
        if outcome.exit_code != EXIT_USAGE:  # on bad input bench has said why in its one line
            print(f"benchrun: bench wrote no record (exit {outcome.exit_code})", file=sys.stderr, flush=True)
        return outcome.exit_code or EXIT_FAILED
    print(json.dumps(outcome.record), flush=True)  # first: the record is on stdout whatever follows
    if args.results:
        append_or_fallback(os.path.join(args.results, "records.jsonl"), outcome.record,
                           f"dlbench-record-{outcome.record['run_id']}.jsonl")
    if outcome.fault:
        print(f"benchrun: error: the run failed: {outcome.fault} (recorded as failed, error kind environment)",
              file=sys.stderr, flush=True)
        return EXIT_ENVIRONMENT
    return outcome.exit_code
