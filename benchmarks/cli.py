"""`bench`: the entrypoint every dlbench image runs.

Only argparse and the config tables are imported at start-up: `bench --help`
and `bench --version` never load a framework (or numpy, pydantic, rich).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import __version__
from .config import (
    DATA_FORMATS,
    DEVICES,
    FRAMEWORK_ALIASES,
    FRAMEWORKS,
    MODELS,
    PRECISIONS,
    PS_PLACEMENTS,
    STRATEGIES,
    DEFAULTS,
    FASHION_MNIST_PACKAGE,
    build_config,
)
from . import lr_rules
from .distributed import strategies
from .errors import (EXIT_INTERRUPTED, EXIT_OK, EXIT_OOM, EXIT_OUTPUT, EXIT_USAGE, UsageError, check_working_directory,
                     choices, debug_enabled, report_internal_error)

DESCRIPTION = """\
Measure training throughput (images/sec) and peak memory of one CNN on one
framework. Warmup is excluded; the device is synchronised at every timing
boundary; images/sec = images in the timed loop / its wall time.

Other commands:
  bench make-dataset DIR --images N --classes C   write a small JPEG ImageFolder for --data-dir
  bench [--framework F] comm [...]                communication microbenchmark (bench comm --help)

Exit codes: 0 ok, 1 failed (crash), 2 bad input (nothing written),
3 out of memory, 4 timeout, 5 the record could not be written to --output
(saved to the temp-dir file the error names, and printed as JSON), 70 internal
error (one line + log path; --debug shows the traceback), 130 interrupted.
Records for 1, 3, 4 and 130 are still written to --output / --json with that status.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, as for every other bad input
        raise UsageError(message)


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def bench_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="bench",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"bench (dlbench) {__version__}")
    what = p.add_argument_group("what to train")
    what.add_argument(
        "--framework",
        default=os.environ.get("BENCH_FRAMEWORK"),
        help=f"{choices(FRAMEWORKS)} (alias: {choices(FRAMEWORK_ALIASES)}); default: $BENCH_FRAMEWORK, set in each image",
    )
    what.add_argument("--model", default="resnet50", help=f"{choices(MODELS)} (default: resnet50)")
    what.add_argument("--batch-size", type=integer, default=64, help="images per step per worker (default: 64)")
    what.add_argument("--image-size", type=integer, help="input height = width in px (default: 224; 299 for inception3)")
    what.add_argument("--precision", default="fp32", help=f"{choices(PRECISIONS)}: fp32 = TF32 off; tf32 = TF32 tensor cores for float32 matmul/conv (GPU); "
                      "amp-fp16 = float16 autocast + loss scaling (GPU); amp-bf16 = bfloat16 autocast; "
                      "amp = amp-fp16 on GPU, amp-bf16 on CPU. On a CPU only fp32, amp-bf16 and amp (default: fp32)")
    what.add_argument("--data-format", help=f"{choices(DATA_FORMATS)} (default: the framework's native layout)")
    what.add_argument("--xla", action="store_true", help="compile the TensorFlow train step with XLA (tensorflow only)")
    what.add_argument("--compile", nargs="?", const="default", metavar="MODE",
                      help="torch.compile the model (torch only; inductor): default, reduce-overhead or max-autotune "
                      "(--compile alone = default). The first, compiling step is timed on its own before warmup "
                      "(record: compile.compile_time_s); if compilation fails the run trains eager and says so")
    how = p.add_argument_group("how long")
    how.add_argument("--num-warmup-batches", type=integer, default=10, help="untimed steps first (default: 10)")
    how.add_argument("--num-batches", type=integer, default=100, help="timed steps per repeat (default: 100)")
    how.add_argument("--repeats", type=integer, default=1, help="timed loops, each reported; ± is a 95%% t-interval over them (default: 1)")
    how.add_argument("--display-every", type=integer, default=10, metavar="N",
                     help="every N steps print step, images/sec over those N steps and loss to stderr; a progress bar "
                     "with ETA on a terminal; 0 = off. Printing time is excluded from the measurement (default: 10)")
    how.add_argument("--find-max-batch", action="store_true",
                     help="find the largest batch that fits: probe --batch-size, double it until a probe runs out of "
                     "memory, then bisect. Every probe is a normal run with its own record (OOMs included, status oom) "
                     "carrying a batch_search section; the last one holds the answer (batch_search.max_batch). "
                     "Exit 0 with an answer, 3 when not even batch 1 fits. One process only")
    how.add_argument("--max-batch-budget", type=float, default=1800.0, metavar="SECONDS",
                     help="--find-max-batch: stop probing after this many seconds, with the best answer so far; "
                     "a probe still running then is stopped and recorded as timeout (default: 1800)")
    how.add_argument("--max-batch-limit", type=integer, default=65536, metavar="N",
                     help="--find-max-batch: do not double beyond N (default: 65536)")
    how.add_argument("--timeout", type=float, help="seconds before the run is stopped and recorded as 'timeout'; also bounds waiting for other ranks (default: none; ranks wait 300 s)")
    where = p.add_argument_group("where and on what data")
    where.add_argument("--device", default="auto", help=f"{choices(DEVICES)} (default: auto = GPU when one is visible)")
    where.add_argument("--num-threads", type=integer, help="intra-op CPU threads (default: the framework's)")
    where.add_argument("--data-dir", help="ImageFolder tree of JPEGs (DIR/<class>/<image>.jpg); default: synthetic data on the device")
    where.add_argument("--strict-data", action="store_true", help="stop (one line, exit 2) at the first undecodable "
                       "image in --data-dir instead of skipping it (default: skip and count in the record)")
    where.add_argument("--num-data-workers", type=integer, default=2, help="input-pipeline workers for --data-dir (default: 2)")
    where.add_argument("--synthetic-batches", type=integer, default=4, help="distinct synthetic batches rotated on the device (default: 4)")
    where.add_argument("--seed", type=integer, default=0, help="seed for weights, data and shuffling (default: 0)")
    tta = p.add_argument_group(
        "time to accuracy (MLPerf's rules: the clock starts at the first dataset read and includes evaluation; "
        "docs/accuracy.md)")
    tta.add_argument("--target-accuracy", type=float, metavar="A",
                     help="train on real labelled data until the validation accuracy (a fraction) reaches A, and record "
                     "the curve, samples and time to target; data: Fashion-MNIST (--fashion-mnist-dir) or --data-dir with "
                     "a held-out split; --num-batches, --num-warmup-batches and --repeats do not apply (default: off = throughput)")
    tta.add_argument("--eval-every", type=integer, metavar="SAMPLES",
                     help="evaluate after every SAMPLES training images, all workers together (default: a quarter of the training set)")
    tta.add_argument("--max-epochs", type=float, default=DEFAULTS["max_epochs"],
                     help=f"epoch budget: not_converged past it (default: {DEFAULTS['max_epochs']:g})")
    tta.add_argument("--time-budget", type=float, metavar="SECONDS", help="time budget on the run's clock: not_converged past it (default: none)")
    tta.add_argument("--base-lr", type=float, default=DEFAULTS["base_lr"],
                     help=f"SGD (momentum 0.9) learning rate at --base-batch; throughput runs train at it too (default: {DEFAULTS['base_lr']:g})")
    tta.add_argument("--base-batch", type=integer, help="the global batch --base-lr is tuned for (default: --batch-size)")
    tta.add_argument("--lr-rule", default=DEFAULTS["lr_rule"],
                     help=f"{choices(lr_rules.RULES)}: LR at the global batch = base LR x 1, x global/base (linear, Goyal et al.), "
                     "x sqrt(global/base), or linear with LARS's per-layer trust ratio (default: none)")
    tta.add_argument("--warmup-epochs", type=float, help=f"linear warmup from --base-lr to the rule's LR (default: "
                     f"{lr_rules.DEFAULT_WARMUP_EPOCHS:g} for {' and '.join(lr_rules.WARMUP_BY_DEFAULT)}, else 0)")
    tta.add_argument("--val-fraction", type=float, default=DEFAULTS["val_fraction"], help="--data-dir: share of images "
                     f"held out for validation, chosen by a hash of each path (default: {DEFAULTS['val_fraction']:g})")
    tta.add_argument("--val-images", type=integer, metavar="N", help="evaluate on the first N validation images only: "
                     "faster, less precise, the same images for every configuration (default: all)")
    tta.add_argument("--fashion-mnist-dir", default=DEFAULTS["fashion_mnist_dir"], metavar="DIR",
                     help=f"Fashion-MNIST's four gzip IDX files (Debian: apt-get install {FASHION_MNIST_PACKAGE}; "
                     f"default: {DEFAULTS['fashion_mnist_dir']})")
    dist = p.add_argument_group(
        "distributed (one process = one rank; rank and peers come from torchrun, mpirun, srun, horovodrun or benchrun)"
    )
    dist.add_argument(
        "--strategy",
        default=strategies.DEFAULT,
        help=f"{choices(STRATEGIES)}: ddp = PyTorch DDP (gloo on CPU, NCCL on GPU); horovod = Horovod ring all-reduce; "
        "allreduce = TF MultiWorkerMirroredStrategy; ps = TF ParameterServerStrategy (default: none)",
    )
    dist.add_argument("--num-ps", type=integer, default=0, help="parameter-server processes for --strategy ps")
    dist.add_argument("--ps-placement", default="round-robin", help=f"{choices(PS_PLACEMENTS)}: how variables are spread over PS; greedy balances bytes (default: round-robin)")
    dist.add_argument("--worker-port", type=integer, default=2220, help="TF worker ports start here, one per local worker (default: 2220)")
    dist.add_argument("--ps-port", type=integer, default=2230, help="TF PS ports start here; the chief uses ps-port + 10 (default: 2230)")
    dist.add_argument("--rendezvous-port", type=integer, default=2210, help="port of dlbench's rank rendezvous on process 0 (default: 2210)")
    out = p.add_argument_group("output")
    out.add_argument("--output", help="append the record as one JSON line to this file")
    out.add_argument("--json", action="store_true", help="print the record as JSON on stdout (the table goes to stderr)")
    out.add_argument("--mllog", action="store_true", help="also print MLPerf's ':::MLLOG {...}' lines "
                     "(time to accuracy: eval_accuracy with epoch_num, run_stop with its status)")
    out.add_argument("--tensorboard", metavar="DIR", help="write per-step images/sec and loss as TensorBoard scalars "
                     "(needs tensorboardX, tensorboard or tensorflow; loss is read back after each timed loop)")
    out.add_argument("--trace", metavar="DIR", help="after the timed loops (never inside them), profile --trace-steps more "
                     "steps with the framework's profiler on every rank and write, under DIR/<run id>/, each rank's trace "
                     "(rank-R.pt.trace.json; TensorFlow: rank-R.xplane.pb) and a summary (rank-R.summary.json: compute, communication, exposed "
                     "communication, overlap, input, idle per step), referenced by the record's `trace`; under --strategy ps every worker "
                     "and PS process profiles itself while the chief runs K+1 steps per worker (steps marked by their stamps)")
    out.add_argument("--trace-steps", type=integer, default=3, metavar="K", help="steps profiled by --trace (default: 3)")
    out.add_argument("--debug", action="store_true", help="show Python tracebacks of internal errors (also DLBENCH_DEBUG=1)")
    return p


def dataset_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bench make-dataset", description="Write a small ImageFolder tree of random JPEGs.")
    p.add_argument("dir", help="new or empty directory to create")
    p.add_argument("--images", type=integer, default=256, help="number of images (default: 256)")
    p.add_argument("--classes", type=integer, default=8, help="number of class directories (default: 8)")
    p.add_argument("--min-size", type=integer, default=160, help="smallest image side in px (default: 160)")
    p.add_argument("--max-size", type=integer, default=320, help="largest image side in px (default: 320)")
    p.add_argument("--seed", type=integer, default=0)
    return p


def config_of(args, installed_here: bool = True):
    """The run's config from parsed bench arguments (UsageError when invalid). `installed_here=False`:
    the framework runs elsewhere (a container), as for a record the host writes for a run it lost."""
    return build_config(
        framework=args.framework,
        model=args.model,
        image_size=args.image_size,
        data_format=args.data_format,
        batch_size=args.batch_size,
        num_warmup_batches=args.num_warmup_batches,
        num_batches=args.num_batches,
        repeats=args.repeats,
        precision=args.precision,
        device=args.device,
        num_threads=args.num_threads,
        num_data_workers=args.num_data_workers,
        data_dir=args.data_dir,
        seed=args.seed,
        xla=args.xla,
        compile=args.compile,
        synthetic_batches=args.synthetic_batches,
        strategy=args.strategy,
        num_ps=args.num_ps,
        ps_placement=args.ps_placement,
        worker_port=args.worker_port,
        ps_port=args.ps_port,
        rendezvous_port=args.rendezvous_port,
        rendezvous_timeout=args.timeout or 300.0,
        target_accuracy=args.target_accuracy,
        eval_every=args.eval_every,
        max_epochs=args.max_epochs,
        time_budget=args.time_budget,
        base_lr=args.base_lr,
        base_batch=args.base_batch,
        lr_rule=args.lr_rule,
        warmup_epochs=args.warmup_epochs,
        val_fraction=args.val_fraction,
        val_images=args.val_images,
        fashion_mnist_dir=args.fashion_mnist_dir,
        installed_here=installed_here,
    )


def run_benchmark(argv: list[str]) -> int:
    args = bench_parser().parse_args(argv)
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError(f"--timeout must be positive, got {args.timeout:g}")
    if args.seed < 0:
        raise UsageError("--seed must be zero or more")
    if args.display_every < 0:
        raise UsageError(f"--display-every must be zero or more, got {args.display_every}")
    if args.find_max_batch:
        check_max_batch_args(args)
    if args.debug:
        os.environ["DLBENCH_DEBUG"] = "1"  # the worker process inherits it
    from .durable import check_dir, check_file

    if args.output is not None:
        check_file(args.output, "--output")
    if args.trace_steps < 1:
        raise UsageError(f"--trace-steps must be at least 1, got {args.trace_steps}")
    if args.trace is not None:
        check_dir(args.trace, "--trace")
    if args.tensorboard is not None:
        check_dir(args.tensorboard, "--tensorboard")
        from .tensorboard import BACKENDS, available

        if available() is None:
            raise UsageError(f"--tensorboard needs one of {choices(m for m, _ in BACKENDS)} installed; none is")
    config = config_of(args)
    if config.accuracy_mode:
        check_accuracy_world(config)
    data_scan = None
    if config.data_dir is not None:
        from .dataset import check_images

        scan = check_images(config.data_dir, args.strict_data)
        data_scan = {**scan.summary(), "strict": args.strict_data}
        if scan.bad:
            path, why = scan.bad[0]
            print(f"bench: data: skipping {len(scan.bad)} of {len(scan.bad) + len(scan.paths)} images that cannot "
                  f"be decoded (first: {path}: {why}); --strict-data stops instead", file=sys.stderr, flush=True)
    from . import output, provenance, record
    from .supervisor import supervise

    report = sys.stderr if args.json else sys.stdout

    def run_once(config, timeout_s, section=None) -> tuple[dict | None, int]:
        """One run, its record delivered (process 0); `section(record)`: the batch_search section to add."""
        base = {
            "run_id": record.new_run_id(),
            "timestamp_utc": record.utc_now(),
            "provenance": {**provenance.host_provenance(), "command": ["bench", *argv]},
        }
        result, exit_code = supervise(config, base, mllog=args.mllog, report=report, timeout_s=timeout_s, data_scan=data_scan,
                                      display_every=args.display_every,
                                      tensorboard=str(Path(args.tensorboard).resolve()) if args.tensorboard else None,
                                      trace={"dir": str(Path(args.trace).resolve()), "steps": args.trace_steps} if args.trace else None)
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

    from . import maxbatch, record

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


def check_max_batch_args(args) -> None:
    from .distributed.world import detect

    if args.max_batch_budget <= 0:
        raise UsageError(f"--max-batch-budget must be positive, got {args.max_batch_budget:g}")
    if args.max_batch_limit < args.batch_size:
        raise UsageError(f"--max-batch-limit {args.max_batch_limit} is below the first probe, --batch-size {args.batch_size}")
    if detect().size > 1:
        raise UsageError("--find-max-batch searches in one process; run it without a launcher, then use the "
                         "batch size it finds for the multi-rank run")


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


def make_dataset(argv: list[str]) -> int:
    args = dataset_parser().parse_args(argv)
    from .dataset import make_dataset as write
    from .durable import check_dir

    check_dir(args.dir, "make-dataset DIR")

    root = write(args.dir, args.images, args.classes, args.min_size, args.max_size, args.seed)
    print(f"wrote {args.images} images in {args.classes} classes to {root}")
    return 0


FLAG_OPTIONS = ("--json", "--xla", "--mllog", "--find-max-batch", "--help", "-h")  # options that take no value


def is_comm(argv: list[str]) -> bool:
    """`comm` as a word of its own, not the value of an option: `bench --framework torch comm`."""
    return any(arg == "comm" and (i == 0 or not argv[i - 1].startswith("-") or "=" in argv[i - 1]
                                  or argv[i - 1] in FLAG_OPTIONS) for i, arg in enumerate(argv))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        check_working_directory()
        if argv[:1] == ["make-dataset"]:
            return make_dataset(argv[1:])
        if is_comm(argv):
            from .comm.cli import main as comm_main

            return comm_main(argv)
        return run_benchmark(argv)
    except UsageError as error:
        print(f"bench: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # before the worker started (after, the supervisor records it)
        print("bench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as error:  # noqa: BLE001 - a bug: one line and a log, unless --debug
        if debug_enabled(argv):
            raise
        return report_internal_error("bench", error)


if __name__ == "__main__":
    sys.exit(main())
