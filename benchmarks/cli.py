"""`bench`: the entrypoint every dlbench image runs.

Only argparse and the config tables are imported at start-up: `bench --help`
and `bench --version` never load a framework (or numpy, pydantic, rich).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import __version__
from .comm import cli as comm_cli
from .core.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OOM,
    EXIT_OUTPUT,
    EXIT_USAGE,
    UsageError,
    check_working_directory,
    choices,
    debug_enabled,
    report_internal_error,
)
from .distributed import strategies
from .results import mllog
from .runspec import Parser, add_arguments, config_of
from .settings import options
from .settings.options import integer

DESCRIPTION = """\
Measure training throughput (images/sec) and peak memory of one CNN on one
framework. Warmup is excluded; the device is synchronised at every timing
boundary; images/sec = images in the timed loop / its wall time.

Examples:
  bench --framework torch --model resnet50 --batch-size 32 --repeats 5 --output results.jsonl
  bench --framework tensorflow --model inception3 --precision amp-bf16 --device gpu
  bench --framework torch --model resnet50 --data-dir /data/imagenet/train --num-data-workers 8
  bench --framework torch --model smallcnn --target-accuracy 0.85     time to 85% on Fashion-MNIST

Other commands:
  bench make-dataset DIR --images N --classes C   write a small JPEG ImageFolder for --data-dir
  bench [--framework F] comm [...]                communication microbenchmark (bench comm --help)

Exit codes: 0 ok, 1 failed (crash), 2 bad input (nothing written),
3 out of memory, 4 timeout, 5 the record could not be written to --output
(saved to the temp-dir file the error names, and printed as JSON), or
make-dataset's DIR could not be written (disk full; nothing left), 70 internal
error (one line + log path; --debug shows the traceback), 130 interrupted.
Records for 1, 3, 4 and 130 are still written to --output / --json with that status.
"""


def bench_parser(environ=os.environ, add_help: bool = True) -> argparse.ArgumentParser:
    """bench's parser, training options and the `comm` subcommand, from options.OPTIONS;
    `environ`: where defaults such as $BENCH_FRAMEWORK come from."""
    p = Parser(prog="bench", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
               add_help=add_help)
    if add_help:
        p.add_argument("--version", action="version", version=f"bench (dlbench) {__version__}")
    add_arguments(p, environ)
    return p


def dataset_parser() -> argparse.ArgumentParser:
    p = Parser(prog="bench make-dataset", description="Write a small ImageFolder tree of random JPEGs.")
    p.add_argument("dir", help="new or empty directory to create")
    p.add_argument("--images", type=integer, default=256, help="number of images (default: 256)")
    p.add_argument("--classes", type=integer, default=8, help="number of class directories (default: 8)")
    p.add_argument("--min-size", type=integer, default=160, help="smallest image side in px (default: 160)")
    p.add_argument("--max-size", type=integer, default=320, help="largest image side in px (default: 320)")
    p.add_argument("--seed", type=integer, default=0)
    return p


def run_benchmark(argv: list[str]) -> int:
    """bench's command line: a training run (or a batch search), or `bench comm`."""
    args = bench_parser().parse_args(argv)
    if args.command == "comm":
        return comm_cli.main(args, argv)
    options.check_values(vars(args))
    if args.find_max_batch:
        check_max_batch_args(args)
    if args.mllog:
        from .results.mllog import require

        require()
    if args.debug:
        os.environ["DLBENCH_DEBUG"] = "1"  # the worker process inherits it
    from .core.durable import check_dir, check_file

    if args.output is not None:
        check_file(args.output, "--output")
    if args.trace is not None:
        check_dir(args.trace, "--trace")
    if args.tensorboard is not None:
        check_dir(args.tensorboard, "--tensorboard")
        from .results.tensorboard import BACKENDS, available

        if available() is None:
            raise UsageError(f"--tensorboard needs one of {choices(m for m, _ in BACKENDS)} installed; none is")
    config = config_of(args)
    if config.accuracy_mode:
        check_accuracy_world(config)
    if config.reference:
        from .distributed.world import detect
        from .run.reference import check_launch

        check_launch(detect().size, args.find_max_batch)
    data_scan = scan = None
    if config.data_dir is not None:
        from .data.dataset import check_images

        scan = check_images(config.data_dir, args.strict_data)
        data_scan = {**scan.summary(), "strict": args.strict_data}
    if config.accuracy_mode:
        check_labelled_data(config, scan)
    if scan is not None and scan.bad:
        path, why = scan.bad[0]
        print(f"bench: data: skipping {len(scan.bad)} of {len(scan.bad) + len(scan.paths)} images that cannot "
              f"be decoded (first: {path}: {why}); --strict-data stops instead", file=sys.stderr, flush=True)
    from .results import output, provenance, record
    from .results.delivery import deliver
    from .run.supervisor import supervise, training_job

    report = sys.stderr if args.json else sys.stdout
    comparison = provenance.comparison(warn=lambda line: print(f"bench: warning: {line}", file=sys.stderr, flush=True))

    def run_once(config, timeout_s, section=None) -> tuple[dict | None, int]:
        """One run, its record delivered (process 0); `section(record)`: the batch_search section to add."""
        base = {
            "run_id": record.new_run_id(),
            "timestamp_utc": record.utc_now(),
            "provenance": {**provenance.host_provenance(), "command": ["bench", *argv]},
            "comparison": comparison,
        }
        job = training_job(config, base, mllog=args.mllog, mllog_submission=mllog.submission(args),
                           data_scan=data_scan, display_every=args.display_every,
                           tensorboard=str(Path(args.tensorboard).resolve()) if args.tensorboard else None,
                           trace={"dir": str(Path(args.trace).resolve()), "steps": args.trace_steps} if args.trace else None)
        result, exit_code = supervise(job, report=report, timeout_s=timeout_s, display_every=args.display_every)
        if result is None:
            return None, exit_code
        if result["world"]["rank"] != 0:  # process 0 writes the run's one record
            print(f"bench: rank {result['world']['rank']}: {output.throughput_line(result)}", file=sys.stderr)
            return result, exit_code
        if section is not None:
            result = record.validate({**result, "batch_search": section(result)})
        return result, deliver(result, args.output, args.json, lambda: output.render(result, report)) or exit_code

    if args.find_max_batch:
        return find_max_batch(config, args, run_once)
    return run_once(config, args.timeout)[1]


def find_max_batch(config, args, run_once) -> int:
    """Probe batch sizes (maxbatch.Search) until the bracket closes, the limit or the time budget."""
    import dataclasses
    import time

    from .results import record
    from .run import maxbatch

    search = maxbatch.Search(config.batch_size, args.max_batch_limit)
    search_id, deadline = record.new_run_id(), time.monotonic() + args.max_batch_budget
    exit_code = 0
    while (batch := search.next_batch()) is not None:  # the budget is checked as each probe ends (section)
        remaining = max(deadline - time.monotonic(), 1.0)
        phase = search.phase
        print(f"bench: max batch: probe {search.probes + 1} ({phase}): batch {batch}", file=sys.stderr, flush=True)
        timeout = remaining if args.timeout is None else min(remaining, args.timeout)

        def section(result, batch=batch, phase=phase):
            if time.monotonic() >= deadline:  # said first: a probe stopped by the budget ends as timeout
                search.out_of_time(args.max_batch_budget)
            search.observe(batch, result["status"])
            return search.section(search_id, phase, args.max_batch_budget)

        result, exit_code = run_once(dataclasses.replace(config, batch_size=batch), timeout, section)
        if result is None:
            return exit_code
        if exit_code not in (EXIT_OK, EXIT_OOM):  # a crash, a timeout, an output failure: that probe's code
            break
    answer = search.largest_fit
    print(f"bench: max batch: {answer if answer is not None else 'none'} ({search.stop_reason}; "
          f"{search.probes} probes, search {search_id[:8]})", file=sys.stderr, flush=True)
    if exit_code not in (EXIT_OK, EXIT_OOM):
        return exit_code
    return EXIT_OK if answer is not None else EXIT_OOM


def check_accuracy_world(config) -> None:
    from .distributed.world import detect

    strategy, ranks = strategies.get(config.strategy), detect().size
    if not strategy.syncs_replicas and ranks > 1:
        synced = [s.name for s in strategies.STRATEGIES.values() if s.syncs_replicas and s.supports(config.framework)]
        raise UsageError(f"--target-accuracy with {ranks} ranks under --strategy {strategy.name} would train "
                         f"independent replicas; use one of {choices(synced)}")


def check_labelled_data(config, scan) -> None:
    """A time-to-accuracy run's data read as the worker will read it, before anything is built: the four
    Fashion-MNIST files whole, an ImageFolder's held-out split (`scan`: its decodable images), and a
    training set of one batch at least."""
    from .data import labelled

    if config.data_dir is None:
        train = labelled.check_fashion_mnist_files(config.fashion_mnist_dir)
    else:
        train = len(labelled.split(config.data_dir, scan.paths, scan.labels, config.val_fraction)[0][0])
    if train < config.batch_size:
        raise UsageError(f"the training set has {train} images, fewer than one batch "
                         f"(--batch-size {config.batch_size})")


def check_max_batch_args(args) -> None:
    from .distributed.world import detect

    if args.max_batch_limit < args.batch_size:
        raise UsageError(f"--max-batch-limit {args.max_batch_limit} is below the first probe, --batch-size {args.batch_size}")
    if detect().size > 1:
        raise UsageError("--find-max-batch searches in one process; run it without a launcher, then use the "
                         "batch size it finds for the multi-rank run")


def make_dataset(argv: list[str]) -> int:
    """`bench make-dataset`: DIR checked first (exit 2); a file system that fills up (or turns read-only)
    on the way is one line, nothing left behind, exit 5: the output could not be written where asked."""
    args = dataset_parser().parse_args(argv)
    from .core.durable import NoRoom, check_dir
    from .data.dataset import make_dataset as write

    check_dir(args.dir, "make-dataset DIR")
    try:
        root = write(args.dir, args.images, args.classes, args.min_size, args.max_size, args.seed)
    except NoRoom as error:
        print(f"bench: error: {error}", file=sys.stderr)
        return EXIT_OUTPUT
    print(f"wrote {args.images} images in {args.classes} classes to {root}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        check_working_directory()
        if argv[:1] == ["make-dataset"]:
            return make_dataset(argv[1:])
        return run_benchmark(argv)
    except UsageError as error:
        print(f"bench: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # before the worker started (after, the supervisor records it)
        print("bench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as error:  # a bug: one line and a log, unless --debug
        if debug_enabled(argv):
            raise
        return report_internal_error("bench", error)


if __name__ == "__main__":
    sys.exit(main())
