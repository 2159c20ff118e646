"""`bench comm`: the communication microbenchmark's command line (no framework imported here)."""

from __future__ import annotations

import argparse
import os

from ..cli import _Parser, integer
from ..config import DEVICES, FRAMEWORKS, MODELS, PS_PLACEMENTS, resolve_framework
from ..distributed import strategies
from ..errors import UsageError, choices
from . import BACKENDS

COMM_STRATEGIES = tuple(name for name, s in strategies.STRATEGIES.items() if s.comm_ops)
DESCRIPTION = """\
Communication microbenchmark with the frameworks' own collectives, under the same
launchers and images as training: all-reduce over message sizes (nccl-tests'
algbw/busbw), point-to-point ping-pong (NetPIPE-style latency and bandwidth), the
all-reduce of exactly one training step's gradient buckets of --model, and under
--strategy ps the push/pull of the model's variables to the parameter servers.
Every size's result is checked on every rank before it is timed. Record: docs/comm.md.

  benchrun launch --launcher local -n 2 -- --framework torch comm --max-bytes 1M
"""


def size(text: str) -> int:
    from .metrics import parse_size

    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def comm_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bench comm", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["comm"], help=argparse.SUPPRESS)
    p.add_argument("--framework", default=os.environ.get("BENCH_FRAMEWORK"),
                   help=f"{choices(FRAMEWORKS)}; default: $BENCH_FRAMEWORK, set in each image")
    p.add_argument("--backend", help=f"{choices(BACKENDS)} (default: nccl on GPU else gloo for torch; "
                   "collective for tensorflow; ps with --strategy ps)")
    p.add_argument("--ops", help="comma-separated: allreduce, pingpong, gradients (default: all three); "
                   "with --strategy ps: pull, push, ps_step")
    p.add_argument("--min-bytes", type=size, default=4, help="smallest message (default: 4)")
    p.add_argument("--max-bytes", type=size, default=256 * 1024**2, help="largest message (default: 256MiB)")
    p.add_argument("--step-factor", type=integer, default=2, help="size multiplier between steps, 2 or 4 (default: 2)")
    p.add_argument("--warmup-iters", type=integer, default=5, help="untimed operations per size (default: 5, as nccl-tests)")
    p.add_argument("--iters", type=integer, default=20, help="timed operations per size (default: 20, as nccl-tests)")
    p.add_argument("--model", default="resnet50", help=f"whose gradient buckets / variables to send: {choices(MODELS)}")
    p.add_argument("--image-size", type=integer, help="input size the model is built for (TensorFlow: its dense layers' "
                   "sizes depend on it, as in training; default: the model's own); torchvision models do not depend on it")
    p.add_argument("--device", default="auto", help=f"{choices(DEVICES)} (default: auto)")
    p.add_argument("--strategy", default="none", help="none, or ps: pull/push of --model's variables through TensorFlow "
                   "parameter servers (process 0 the chief, then the workers, then --num-ps PS, as training)")
    p.add_argument("--num-ps", type=integer, default=0, help="parameter servers (--strategy ps)")
    p.add_argument("--ps-placement", default="round-robin", help=f"{choices(PS_PLACEMENTS)} (default: round-robin)")
    p.add_argument("--worker-port", type=integer, default=2220)
    p.add_argument("--ps-port", type=integer, default=2230)
    p.add_argument("--rendezvous-port", type=integer, default=2210)
    p.add_argument("--timeout", type=float, help="seconds before the run is stopped and recorded as 'timeout'")
    p.add_argument("--output", help="append the record as one JSON line to this file")
    p.add_argument("--json", action="store_true", help="print the record as JSON on stdout (the table goes to stderr)")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks of internal errors (also DLBENCH_DEBUG=1)")
    return p


def default_backend(framework: str, strategy: str, device: str, has_gpu) -> str:
    """The backend a training run of this framework would use on this device."""
    if framework == "tensorflow":
        return strategies.get(strategy).comm_backend or "collective"
    return "nccl" if device != "cpu" and has_gpu() else "gloo"


def _cuda_visible() -> bool:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def options_from(args):
    from .base import CommOptions

    framework = resolve_framework(args.framework)
    if args.model not in MODELS:
        raise UsageError(f"unknown model {args.model!r} (choices: {choices(MODELS)})")
    if args.device not in DEVICES:
        raise UsageError(f"--device {args.device!r} is invalid (choices: {choices(DEVICES)})")
    if args.strategy not in COMM_STRATEGIES:
        raise UsageError(f"--strategy {args.strategy!r} is invalid for comm (choices: {choices(COMM_STRATEGIES)})")
    strategy = strategies.get(args.strategy)
    if not strategy.supports(framework):
        raise UsageError(f"--strategy {args.strategy} applies to --framework {choices(strategy.frameworks)} only")
    if strategy.uses_ps != (args.num_ps > 0):
        takers = " or ".join(s.name for s in strategies.STRATEGIES.values() if s.uses_ps)
        raise UsageError(f"--strategy {takers} needs --num-ps 1 or more, and --num-ps needs --strategy {takers}")
    if args.ps_placement not in PS_PLACEMENTS:
        raise UsageError(f"--ps-placement {args.ps_placement!r} is invalid (choices: {choices(PS_PLACEMENTS)})")
    backend = args.backend or default_backend(framework, args.strategy, args.device, _cuda_visible)
    if backend not in BACKENDS:  # every strategy's own backend is registered there too
        raise UsageError(f"unknown backend {backend!r} (choices: {choices(BACKENDS)})")
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
    spec = MODELS[args.model]
    image_size = spec.default_image_size if args.image_size is None else args.image_size
    if image_size < spec.min_image_size:
        raise UsageError(f"--image-size {image_size} is too small for {args.model} (minimum {spec.min_image_size})")
    for flag in ("iters", "min_bytes", "max_bytes"):
        if getattr(args, flag) <= 0:
            raise UsageError(f"--{flag.replace('_', '-')} must be positive")
    if args.warmup_iters < 0:
        raise UsageError("--warmup-iters must be zero or more")
    if args.step_factor not in (2, 4):
        raise UsageError(f"--step-factor must be 2 or 4, got {args.step_factor}")
    if args.min_bytes > args.max_bytes:
        raise UsageError(f"--min-bytes {args.min_bytes} is above --max-bytes {args.max_bytes}")
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError(f"--timeout must be positive, got {args.timeout:g}")
    for flag in ("worker_port", "ps_port", "rendezvous_port"):
        port = getattr(args, flag)
        if not 1 <= port <= 65535 - 64:
            raise UsageError(f"--{flag.replace('_', '-')} {port} is out of range (1-65471)")
    from ..config import require_installed

    require_installed(framework)
    return CommOptions(framework=framework, backend=backend, ops=ops, min_bytes=args.min_bytes,
                       max_bytes=args.max_bytes, step_factor=args.step_factor, warmup_iters=args.warmup_iters,
                       iters=args.iters, model=args.model, image_size=image_size, device=args.device, strategy=args.strategy,
                       num_ps=args.num_ps, ps_placement=args.ps_placement, worker_port=args.worker_port,
                       ps_port=args.ps_port, rendezvous_port=args.rendezvous_port,
                       rendezvous_timeout=args.timeout or 300.0, timeout=args.timeout)


def main(argv: list[str]) -> int:
    import sys

    args = comm_parser().parse_args(argv)
    if args.debug:
        os.environ["DLBENCH_DEBUG"] = "1"
    from ..durable import check_file

    if args.output is not None:
        check_file(args.output, "--output")
    options = options_from(args)
    from .. import provenance, record
    from ..cli import deliver
    from . import table
    from .measure import run_comm

    base = {"run_id": record.new_run_id(), "timestamp_utc": record.utc_now(),
            "provenance": {**provenance.host_provenance(), "command": ["bench", *argv]}}

    def write(result: dict) -> int | None:
        return deliver(result, args.output, args.json, lambda: table.render(result, sys.stderr if args.json else sys.stdout))

    return run_comm(options, base, write)
