"""`bench comm`: the communication microbenchmark's command line (no framework imported here)."""

from __future__ import annotations

import argparse
import os

from ..core.errors import UsageError, choices
from ..core.framework_specs import FRAMEWORKS
from ..distributed import cluster, strategies
from ..distributed.world import run_token
from ..settings.config import image_size_for, require_installed, resolve_framework
from ..settings.options import COMM, RENDEZVOUS_TIMEOUT_S, RUN, check_values, given, of
from . import BACKENDS

DESCRIPTION = """\
Communication microbenchmark with the frameworks' own collectives, under the same
launchers and images as training: all-reduce over message sizes (nccl-tests'
algbw/busbw), point-to-point ping-pong (NetPIPE-style latency and bandwidth), the
all-reduce of exactly one training step's gradient buckets of --model, and under
--strategy ps the push/pull of the model's variables to the parameter servers.
Every size's result is checked on every rank before it is timed. Record: docs/comm.md.

  benchrun launch --launcher local -n 2 -- --framework torch comm --max-bytes 1M
"""


def add_parser(commands, environ=os.environ, given_only: bool = False) -> None:
    """`comm` on bench's subcommands; options it shares with training are bench's own (given before
    or after the word `comm`), each held once by options.OPTIONS. `given_only`: as runspec.add_arguments."""
    p = commands.add_parser("comm", help="communication microbenchmark (bench comm --help)", description=DESCRIPTION,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    for option in of(COMM):
        option.add_to(p, environ, suppress_default=given_only or RUN in option.commands)


def default_backend(framework: str, strategy: str, device: str, has_gpu) -> str:
    """The backend a training run of this framework would use on this device: the strategy's own, else the
    framework's for the device (`has_gpu` is asked only where that differs: it may import the framework)."""
    own = strategies.get(strategy).comm_backend
    if own is not None:
        return own
    cpu, gpu = FRAMEWORKS[framework].comm_backends
    return gpu if cpu != gpu and device != "cpu" and has_gpu() else cpu


def _cuda_visible() -> bool:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def options_from(args, installed_here: bool = True):
    """`installed_here=False`: the framework runs elsewhere (a container), as for a record the host writes
    for a run it lost; the default backend then follows --device alone."""
    from .base import CommOptions

    framework = resolve_framework(args.framework)
    check_values({o.dest: getattr(args, o.dest) for o in of(COMM)})
    if args.strategy not in strategies.COMM_NAMES:
        raise UsageError(f"--strategy {args.strategy!r} is invalid for comm (choices: {choices(strategies.COMM_NAMES)})")
    strategy = strategies.get(args.strategy)
    if not strategy.supports(framework):
        raise UsageError(f"--strategy {args.strategy} applies to --framework {choices(strategy.frameworks)} only")
    strategy.check_num_ps(args.num_ps)
    has_gpu = _cuda_visible if installed_here else lambda: args.device == "gpu"
    backend = args.backend or default_backend(framework, args.strategy, args.device, has_gpu)
    if BACKENDS[backend][0] != framework:
        valid = [b for b, (fw, _) in BACKENDS.items() if fw == framework]
        raise UsageError(f"--backend {backend} is not a {framework} backend (choices: {choices(valid)})")
    own_backends = {s.comm_backend for s in strategies.STRATEGIES.values() if s.comm_backend}
    if backend in own_backends and backend != strategy.comm_backend:
        raise UsageError(f"--backend {backend} goes with its own strategy only, not --strategy {strategy.name}")
    if strategy.comm_backend and backend != strategy.comm_backend:
        raise UsageError(f"--strategy {strategy.name} measures --backend {strategy.comm_backend} (and only it)")
    valid_ops = strategy.comm_ops
    ops = tuple(o.strip() for o in args.ops.split(",") if o.strip()) if args.ops else valid_ops
    bad = [o for o in ops if o not in valid_ops]
    if bad or not ops:
        raise UsageError(f"--ops {args.ops!r}: unknown {choices(bad) or 'empty'} (choices: {choices(valid_ops)})")
    image_size = image_size_for(args.model, args.image_size)
    if args.min_bytes > args.max_bytes:
        raise UsageError(f"--min-bytes {args.min_bytes} is above --max-bytes {args.max_bytes}")
    if installed_here:
        require_installed(framework)
    return CommOptions(framework=framework, backend=backend, ops=ops, min_bytes=args.min_bytes,
                       max_bytes=args.max_bytes, step_factor=args.step_factor, warmup_iters=args.warmup_iters,
                       iters=args.iters, model=args.model, image_size=image_size, device=args.device, strategy=args.strategy,
                       num_ps=args.num_ps, ps_placement=args.ps_placement, **cluster.run_ports(vars(args), run_token()),
                       rendezvous_timeout=args.timeout or RENDEZVOUS_TIMEOUT_S, timeout=args.timeout)


def main(args, argv: list[str]) -> int:
    """`bench comm`, its arguments parsed by bench's parser (benchmarks/cli.py)."""
    import sys

    stray = given(args, RUN)
    if stray:
        raise UsageError(f"{stray[0]} applies to training runs, not to `bench comm`")
    if args.debug:
        os.environ["DLBENCH_DEBUG"] = "1"
    from ..core.durable import check_file

    if args.output is not None:
        check_file(args.output, "--output")
    options = options_from(args)
    from ..results import provenance, record
    from ..results.delivery import deliver
    from ..run.supervisor import supervise
    from . import table
    from .measure import comm_job

    base = {"run_id": record.new_run_id(), "timestamp_utc": record.utc_now(),
            "provenance": {**provenance.host_provenance(), "command": ["bench", *argv]}}
    report = sys.stderr if args.json else sys.stdout
    result, code = supervise(comm_job(options, base), report=report, timeout_s=options.timeout)
    if result is None or result["world"]["rank"] != 0:  # process 0 writes the run's one record
        return code
    return deliver(result, args.output, args.json, lambda: table.render(result, report)) or code
