"""bench's options, each stated once: name, type, default, choices, the rule its value obeys, help.

Everything else is derived from OPTIONS: bench's parser (training and `bench comm`,
benchmarks/cli.py), the run configuration (config.BenchConfig), the record's
choices (record.RunConfig), `bench comm`'s options (comm.base.CommOptions) and a
sweep plan's `bench:` keys (runners/sweep.py). Rules that join several options
belong to the object they are about (the strategy counts its parameter servers).
Only the standard library and framework-free tables are imported: `bench --help`.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..core.errors import UsageError, choices
from ..core.framework_specs import ALIASES, COMM_BACKENDS, FRAMEWORKS
from ..data.fashion_mnist import FASHION_MNIST_DIR, FASHION_MNIST_PACKAGE
from ..distributed import strategies
from ..distributed.cluster import SEED_000_PORTS, TOKEN_PORTS
from ..measure import ceiling
from ..measure.compilation import COMPILE_MODES
from ..measure.precision import PRECISIONS
from ..measure.step_timing import STEP_TIMINGS
from ..tta import lr_rules
from .models import MODELS

RUN, COMM = "run", "comm"  # the commands: a training run, and `bench comm`
MAX_PORT = 65535 - 64  # every port option is a base: local process indexes (and the chief's + 10) are added


@dataclass(frozen=True)
class Check:
    """A rule one value obeys; `says` what the value must be when it does not."""

    test: Callable[[Any], bool]
    says: str


POSITIVE_INT = Check(lambda v: v > 0, "must be a positive integer")
AT_LEAST_ONE = Check(lambda v: v >= 1, "must be at least 1")
NON_NEGATIVE = Check(lambda v: v >= 0, "must be zero or more")
POSITIVE = Check(lambda v: v > 0, "must be positive")
FRACTION = Check(lambda v: 0 < v <= 1, "is a fraction in (0, 1]")
SHARE = Check(lambda v: 0 < v < 1, "must be between 0 and 1")
PORT = Check(lambda v: 1 <= v <= MAX_PORT, f"must be a port between 1 and {MAX_PORT}")


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


# binary units, as nccl-tests' -b/-e take them
SIZE_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2, "MIB": 1024**2,
              "G": 1024**3, "GB": 1024**3, "GIB": 1024**3}


def parse_size(text: str) -> int:
    """'4', '4B', '64K', '256MiB' (binary units, as nccl-tests' -b/-e) -> bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
    if not match or match.group(2).upper() not in SIZE_UNITS:
        raise ValueError(f"not a size: {text!r} (examples: 4, 64K, 256MiB)")
    return int(match.group(1)) * SIZE_UNITS[match.group(2).upper()]


def size(text: str) -> int:
    """A message size for argparse: 1024, 64K, 1M, 1GiB (parse_size)."""
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


@dataclass(frozen=True)
class Option:
    dest: str
    type: type  # int, float, str, or bool: a flag that takes no value
    default: Any = None
    help: str = ""  # %(default)s and %(choices)s are filled in
    group: str = "output"  # its heading in `bench --help` (GROUPS); comm's own options: "comm"
    choices: tuple = ()
    aliases: dict = field(default_factory=dict)  # other names of choices (matched ignoring case)
    noun: Optional[str] = None  # a bad choice reads "unknown NOUN 'x'" rather than "--flag 'x' is invalid"
    check: Optional[Check] = None
    commands: tuple = (RUN,)
    config: bool = False  # a field of the run configuration, so of every training record
    metavar: Optional[str] = None
    parse: Optional[Callable] = None  # argparse's type= when the text is not read as `type`
    nargs: Optional[str] = None
    const: Any = None
    env: Optional[str] = None  # the default comes from this variable when set

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")

    def default_from(self, environ) -> Any:
        """An empty variable is no value (the Horovod images set BENCH_FRAMEWORK= : --framework is needed)."""
        return (environ.get(self.env) or self.default) if self.env else self.default

    def help_text(self) -> str:
        text = self.help % {"default": "none" if self.default is None else _shown(self.default),
                            "choices": choices((*self.choices, *self.aliases))}
        return text.replace("%", "%%")  # argparse formats it again

    def add_to(self, parser, environ=os.environ, suppress_default: bool = False) -> None:
        """This option on `parser`; `suppress_default`: left out of the result unless given (a
        subcommand's copy of an option its parent parser holds, so the parent's value stands)."""
        default = argparse.SUPPRESS if suppress_default else self.default_from(environ)
        if self.type is bool:
            parser.add_argument(self.flag, action="store_true", default=default, help=self.help_text())
            return
        parse = self.parse or {int: integer, float: float}.get(self.type)
        parser.add_argument(self.flag, type=parse, default=default, help=self.help_text(), metavar=self.metavar,
                            **({"nargs": self.nargs, "const": self.const} if self.nargs else {}))

    def resolved(self, value):
        """The choice `value` names (an alias, in any case, names its choice)."""
        if not self.aliases or not isinstance(value, str):
            return value
        key = value.strip().lower()
        return self.aliases.get(key, key)

    def problem(self, value) -> Optional[str]:
        """The one line saying why bench refuses `value` for this option, or None."""
        if value is None:
            return None
        if self.choices and self.resolved(value) not in self.choices:
            listed = choices((*self.choices, *self.aliases))
            return f"unknown {self.noun} {value!r} (choices: {listed})" if self.noun else \
                f"{self.flag} {value!r} is invalid (choices: {listed})"
        if self.check is not None and not self.check.test(value):
            return f"{self.flag} {self.check.says}, got {_shown(value)}"
        return None

    def validate(self, value) -> None:
        problem = self.problem(value)
        if problem:
            raise UsageError(problem)


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


DIVISIONS = ("closed", "open")  # MLPerf's submission divisions (--mllog-division)
RENDEZVOUS_TIMEOUT_S = 300.0  # how long ranks wait for each other without --timeout
BOTH = (RUN, COMM)

GROUPS = {  # bench --help's headings, in order
    "what": "what to train",
    "how": "how long",
    "where": "where and on what data",
    "tta": "time to accuracy (MLPerf's rules: the clock starts at the first dataset read and includes evaluation; "
           "docs/accuracy.md)",
    "dist": "distributed (one process = one rank; rank and peers come from torchrun, mpirun, srun, horovodrun or benchrun)",
    "output": "output",
}


def _table(*options: Option) -> dict[str, Option]:
    return {option.dest: option for option in options}


OPTIONS: dict[str, Option] = _table(
    # what to train
    Option("framework", str, None, "%(choices)s; default: $BENCH_FRAMEWORK, set in each image", "what",
           choices=tuple(FRAMEWORKS), aliases=ALIASES, noun="framework",
           env="BENCH_FRAMEWORK", commands=BOTH, config=True),
    Option("model", str, "resnet50", "%(choices)s (default: %(default)s)", "what", tuple(MODELS), noun="model",
           commands=BOTH, config=True),
    Option("batch_size", int, 64, "images per step per worker (default: %(default)s)", "what", check=POSITIVE_INT,
           config=True),
    Option("image_size", int, None, "input height = width in px (default: 224; 299 for inception3)", "what",
           check=POSITIVE_INT, commands=BOTH, config=True),
    Option("precision", str, "fp32", "%(choices)s: fp32 = TF32 off; tf32 = TF32 tensor cores for float32 matmul/conv "
           "(GPU); amp-fp16 = float16 autocast + loss scaling (GPU); amp-bf16 = bfloat16 autocast; amp = amp-fp16 on "
           "GPU, amp-bf16 on CPU. On a CPU only fp32, amp-bf16 and amp (default: %(default)s)", "what", PRECISIONS,
           config=True),
    Option("data_format", str, None, "%(choices)s (default: the framework's native layout)", "what",
           ("channels_first", "channels_last"), config=True),
    Option("xla", bool, False, "compile the TensorFlow train step with XLA (tensorflow only)", "what", config=True),
    Option("compile", str, None, "torch.compile the model (torch only; inductor): %(choices)s (--compile alone = "
           "default). The first, compiling step is timed on its own before warmup (record: compile.compile_time_s); "
           "if compilation fails the run trains eager and says so", "what", COMPILE_MODES, metavar="MODE", nargs="?",
           const="default", config=True),
    # how long
    Option("num_warmup_batches", int, 10, "untimed steps first (default: %(default)s)", "how", check=NON_NEGATIVE,
           config=True),
    Option("num_batches", int, 100, "timed steps per repeat (default: %(default)s)", "how", check=POSITIVE_INT,
           config=True),
    Option("repeats", int, 1, "timed loops, each reported; ± is a 95%% t-interval over them (default: %(default)s)",
           "how", check=POSITIVE_INT, config=True),
    Option("step_timing", str, "sync", "%(choices)s: how each timed step is timed. sync = the device "
           "synchronised after every step, the host clock read at its end; events = a CUDA event recorded after "
           "every step, one synchronisation at each end of the loop, a step = the time between two events, and "
           "cudnn.benchmark on (torch on a GPU only). The record's step_timing says which clock ran (default: "
           "%(default)s)", "how", STEP_TIMINGS, config=True),
    Option("ceiling", str, ceiling.DEFAULT_MODE, "%(choices)s: the measured ceiling MFU is also held against, after "
           "the timed loops: a square matrix multiply in the run's math on the run's device and threads, a few sizes, "
           "the best sustained rate. cached = measured once per machine, framework version, math and threads, then "
           "read from ~/.cache/dlbench (XDG_CACHE_HOME); measure = probe again and replace it; off = none (default: "
           "$DLBENCH_CEILING, else %(default)s)", "how", ceiling.MODES, config=True, env="DLBENCH_CEILING"),
    Option("reference", bool, False, "also time the bare training loop a careful user writes by hand, in the same "
           "process: the same model, SGD with momentum, batch, image size, device, threads and synthetic batches, the "
           "same warmup and timed steps, nothing of bench around it; one bare loop beside each repeat (alternating "
           "which goes first), its warmup untimed. The record's `reference` and the headroom line's 'vs bare loop' give "
           "bench's images/sec / the bare loop's, the mean of the per-repeat ratios with a 95%% t-interval: what the "
           "harness costs. One process only; synthetic data, fp32 or tf32, no --compile or --xla, the native layout. "
           "The memory peaks then include the bare loop's copy of the model", "how", config=True),
    Option("display_every", int, 10, "every N steps print step, images/sec over those N steps and loss to stderr; a "
           "progress bar with ETA on a terminal; 0 = off. Printing time is excluded from the measurement (default: "
           "%(default)s)", "how", check=NON_NEGATIVE, metavar="N"),
    Option("find_max_batch", bool, False, "find the largest batch that fits: probe --batch-size, double it until a "
           "probe runs out of memory, then bisect. Every probe is a normal run with its own record (OOMs included, "
           "status oom) carrying a batch_search section; the last one holds the answer (batch_search.max_batch). "
           "Exit 0 with an answer, 3 when not even batch 1 fits. One process only", "how"),
    Option("max_batch_budget", float, 1800.0, "--find-max-batch: stop probing after this many seconds, with the best "
           "answer so far; a probe still running then is stopped and recorded as timeout (default: %(default)s)",
           "how", check=POSITIVE, metavar="SECONDS"),
    Option("max_batch_limit", int, 65536, "--find-max-batch: do not double beyond N (default: %(default)s)", "how",
           check=POSITIVE_INT, metavar="N"),
    Option("timeout", float, None, "seconds before the run is stopped and recorded as 'timeout'; also bounds waiting "
           f"for other ranks (default: none; ranks wait {RENDEZVOUS_TIMEOUT_S:g} s)", "how", check=POSITIVE, commands=BOTH),
    # where and on what data
    Option("device", str, "auto", "%(choices)s (default: auto = GPU when one is visible)", "where",
           ("auto", "cpu", "gpu"), commands=BOTH, config=True),
    Option("num_threads", int, None, "intra-op CPU threads (default: the framework's)", "where", check=POSITIVE_INT,
           config=True),
    Option("data_dir", str, None, "ImageFolder tree of JPEGs (DIR/<class>/<image>.jpg); default: synthetic data on "
           "the device", "where", config=True),
    Option("strict_data", bool, False, "stop (one line, exit 2) at the first undecodable image in --data-dir instead "
           "of skipping it (default: skip and count in the record)", "where"),
    Option("num_data_workers", int, 2, "input-pipeline workers for --data-dir (default: %(default)s)", "where",
           check=POSITIVE_INT, config=True),
    Option("strict_preflight", bool, False, "refuse the run (one line, exit 2, nothing run or written) when a "
           "rank's preflight fails: more compute threads than the CPUs its affinity and cgroup quota allow, a "
           "/dev/shm smaller than the data workers and the transport need, --device gpu without a GPU (default: "
           "say it in one line, label the record's preflight section and run)", "where", config=True),
    Option("synthetic_batches", int, 4, "distinct synthetic batches rotated on the device; one fixed batch flatters "
           "caches (default: %(default)s)", "where", check=POSITIVE_INT, config=True),
    Option("seed", int, 0, "seed for weights, data and shuffling (default: %(default)s)", "where", check=NON_NEGATIVE,
           config=True),
    # time to accuracy
    Option("target_accuracy", float, None, "train on real labelled data until the validation accuracy (a fraction) "
           "reaches A, and record the curve, samples and time to target; data: Fashion-MNIST (--fashion-mnist-dir) or "
           "--data-dir with a held-out split; --num-batches, --num-warmup-batches and --repeats do not apply "
           "(default: off = throughput)", "tta", check=FRACTION, metavar="A", config=True),
    Option("eval_every", int, None, "evaluate after every SAMPLES training images, all workers together (default: a "
           "quarter of the training set)", "tta", check=POSITIVE_INT, metavar="SAMPLES", config=True),
    Option("max_epochs", float, 10.0, "epoch budget: not_converged past it (default: %(default)s)", "tta",
           check=POSITIVE, config=True),
    Option("time_budget", float, None, "time budget on the run's clock: not_converged past it (default: none)", "tta",
           check=POSITIVE, metavar="SECONDS", config=True),
    Option("base_lr", float, 0.01, "SGD (momentum 0.9) learning rate at --base-batch; throughput runs train at it too "
           "(default: %(default)s)", "tta", check=POSITIVE, config=True),
    Option("base_batch", int, None, "the global batch --base-lr is tuned for (default: --batch-size)", "tta",
           check=POSITIVE_INT, config=True),
    Option("lr_rule", str, lr_rules.DEFAULT_RULE, "%(choices)s: LR at the global batch = base LR x 1, x global/base "
           "(linear, Goyal et al.), x sqrt(global/base), or linear with LARS's per-layer trust ratio (default: "
           "%(default)s)", "tta", lr_rules.RULES, config=True),
    Option("warmup_epochs", float, None, f"linear warmup from --base-lr to the rule's LR (default: "
           f"{lr_rules.DEFAULT_WARMUP_EPOCHS:g} for {' and '.join(lr_rules.WARMUP_BY_DEFAULT)}, else 0)", "tta",
           check=NON_NEGATIVE, config=True),
    Option("val_fraction", float, 0.1, "--data-dir: share of images held out for validation, chosen by a hash of each "
           "path (default: %(default)s)", "tta", check=SHARE, config=True),
    Option("val_images", int, None, "evaluate on the first N validation images only: faster, less precise, the same "
           "images for every configuration (default: all)", "tta", check=POSITIVE_INT, metavar="N", config=True),
    Option("fashion_mnist_dir", str, FASHION_MNIST_DIR, "Fashion-MNIST's four gzip IDX files (Debian: apt-get install "
           f"{FASHION_MNIST_PACKAGE}; default: %(default)s)", "tta", metavar="DIR", config=True),
    # distributed
    Option("strategy", str, strategies.DEFAULT, "%(choices)s: " + "; ".join(
           f"{s.name} = {s.summary}" for s in strategies.STRATEGIES.values() if s.name != strategies.DEFAULT)
           + " (default: %(default)s)", "dist", strategies.NAMES, noun="strategy", commands=BOTH, config=True),
    Option("num_ps", int, 0, "parameter-server processes for --strategy ps", "dist", check=NON_NEGATIVE,
           commands=BOTH, config=True),
    Option("ps_placement", str, "round-robin", "%(choices)s: how variables are spread over PS; greedy balances bytes "
           "(default: %(default)s)", "dist", ("round-robin", "greedy"), commands=BOTH, config=True),
    Option("worker_port", int, None, "TF worker ports start here, one per local worker (default: --rendezvous-port "
           "+ 10)", "dist", check=PORT, commands=BOTH, config=True),
    Option("ps_port", int, None, "TF PS ports start here; the chief uses ps-port + 10 (default: --rendezvous-port "
           "+ 20)", "dist", check=PORT, commands=BOTH, config=True),
    Option("rendezvous_port", int, None, "port of dlbench's rank rendezvous on process 0; DDP and FSDP outside torchrun take "
           f"the next one (default: one in {TOKEN_PORTS.start}-{TOKEN_PORTS.stop - 1} picked by the run's token, so "
           f"that concurrent runs differ; {SEED_000_PORTS['rendezvous_port']} when the launcher gives no token)",
           "dist", check=PORT, commands=BOTH, config=True),
    # output
    Option("output", str, None, "append the record as one JSON line to this file", commands=BOTH),
    Option("json", bool, False, "print the record as JSON on stdout (the table goes to stderr)", commands=BOTH),
    Option("mllog", bool, False, "also print MLPerf's ':::MLLOG {...}' lines, written by MLCommons' mlperf-logging "
           "(time to accuracy: eval_accuracy with epoch_num, run_stop with its status)"),
    Option("mllog_org", str, None, "--mllog: MLPerf's submission_org, who submits (default: $MLPERF_SUBMISSION_ORG; "
           "without it the compliance checker asks for it)", metavar="ORG", env="MLPERF_SUBMISSION_ORG"),
    Option("mllog_platform", str, None, "--mllog: MLPerf's submission_platform, the system's name (default: "
           "$MLPERF_SUBMISSION_PLATFORM)", metavar="NAME", env="MLPERF_SUBMISSION_PLATFORM"),
    Option("mllog_division", str, None, "--mllog: MLPerf's submission_division, %(choices)s (default: "
           "$MLPERF_SUBMISSION_DIVISION)", choices=DIVISIONS, env="MLPERF_SUBMISSION_DIVISION"),
    Option("tensorboard", str, None, "write per-step images/sec and loss as TensorBoard scalars (needs tensorboardX, "
           "tensorboard or tensorflow; loss is read back after each timed loop)", metavar="DIR"),
    Option("trace", str, None, "after the timed loops (never inside them), profile --trace-steps more steps with the "
           "framework's profiler on every rank and write, under DIR/<run id>/, each rank's trace (rank-R.pt.trace.json; "
           "TensorFlow: rank-R.xplane.pb) and a summary (rank-R.summary.json: compute, communication, exposed "
           "communication, overlap, input, idle per step), referenced by the record's `trace`; under --strategy ps "
           "every worker and PS process profiles itself while the chief runs K+1 steps per worker (steps marked by "
           "their stamps)", metavar="DIR"),
    Option("trace_steps", int, 3, "steps profiled by --trace (default: %(default)s)", check=AT_LEAST_ONE, metavar="K"),
    Option("debug", bool, False, "show Python tracebacks of internal errors (also DLBENCH_DEBUG=1)", commands=BOTH),
    # bench comm's own
    Option("backend", str, None, "%(choices)s (default: nccl on GPU else gloo for torch; collective for tensorflow; ps "
           "with --strategy ps)", "comm", tuple(COMM_BACKENDS), noun="backend", commands=(COMM,)),
    Option("ops", str, None, "comma-separated: allreduce, pingpong, gradients (default: all three); with --strategy "
           "ps: pull, push, ps_step", "comm", commands=(COMM,)),
    Option("min_bytes", int, 4, "smallest message (default: %(default)s)", "comm", check=POSITIVE, parse=size,
           commands=(COMM,)),
    Option("max_bytes", int, 256 * 1024**2, "largest message (default: 256MiB)", "comm", check=POSITIVE, parse=size,
           commands=(COMM,)),
    Option("step_factor", int, 2, "size multiplier between steps, 2 or 4 (default: %(default)s)", "comm",
           check=Check(lambda v: v in (2, 4), "must be 2 or 4"), commands=(COMM,)),
    Option("warmup_iters", int, 5, "untimed operations per size (default: %(default)s, as nccl-tests)", "comm",
           check=NON_NEGATIVE, commands=(COMM,)),
    Option("iters", int, 20, "timed operations per size (default: %(default)s, as nccl-tests)", "comm", check=POSITIVE,
           commands=(COMM,)),
)

DEFAULTS = {name: option.default for name, option in OPTIONS.items()}
CONFIG_OPTIONS = tuple(option for option in OPTIONS.values() if option.config)  # the run configuration's, in order


def of(command: str) -> tuple[Option, ...]:
    return tuple(option for option in OPTIONS.values() if command in option.commands)


def choices_of(name: str) -> tuple:
    return OPTIONS[name].choices


def check_values(values: dict) -> None:
    """Every option's own rule, for the values given (None: not given). UsageError at the first problem."""
    for name, value in values.items():
        if name in OPTIONS:
            OPTIONS[name].validate(value)


def given(args, command: str, environ=os.environ) -> list[str]:
    """The flags of options that belong to `command` only and were given (differ from their default, the
    environment's where the option takes one: an exported MLPERF_SUBMISSION_ORG is not a flag given to comm)."""
    return [o.flag for o in of(command)
            if o.commands == (command,) and getattr(args, o.dest, o.default) != o.default_from(environ)]
