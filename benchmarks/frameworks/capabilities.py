"""What a backend may do beyond the required interface (frameworks/base.py's Framework), one protocol each.

A new backend starts with the required methods alone and trains, times and records; each capability it adds
lights up one feature: FLOP counts and MFU, the GEMM ceiling, --trace, time to accuracy. Callers ask for a
capability with `of(backend, Capability, missing)`, which hands back the backend or raises
NotImplementedError with the line the record keeps ("tensorflow does not count FLOPs"), so a missing
capability is reported exactly as a failing one, and the measurement stands.
"""

from __future__ import annotations

from typing import Iterator, Protocol, TypeVar, runtime_checkable


@runtime_checkable
class CompilesFirstStep(Protocol):
    """The first step traces or compiles a graph: the measurement runs it apart, before warmup."""

    @property
    def compiles(self) -> bool:
        """Whether this run compiles (torch: --compile given; TensorFlow: always, its step is a tf.function)."""

    def compile_step(self, batches: Iterator) -> None:
        """Run the first, compiling step, synchronised and timed on its own; fill compile_state."""


@runtime_checkable
class CountsFlops(Protocol):
    def count_flops(self):
        """flops.Counted for this model at the run's image size, counted by the framework without real
        compute; called after the timed loops. Raising leaves the counts null with the reason."""


@runtime_checkable
class ProbesGemm(Protocol):
    def gemm_factory(self, math: str):
        """The ceiling probe's GEMM on this run's device in `math` (frameworks/gemm.py; benchmarks/measure/ceiling.py)."""


@runtime_checkable
class ProfilesSteps(Protocol):
    trace_suffix: str  # the profiler trace's file name ending (bench --trace)

    def profile_steps(self, batches: Iterator, num_steps: int, path) -> None:
        """Run `num_steps` steps under the framework's own profiler (bench --trace, after the timed loops),
        marked with timing.run_steps' `annotate`, and write its trace to `path`."""


@runtime_checkable
class ProfilesServing(Protocol):
    """A process whose steps someone else schedules (a PS-mode worker or PS) profiles itself."""

    def start_profiler(self, path) -> object:
        """Start the profiler; stop_profiler(handle, path) writes its trace to `path`."""

    def stop_profiler(self, handle, path) -> None: ...


@runtime_checkable
class DrivesWorkers(Protocol):
    """A strategy whose chief drives the workers (TensorFlow's parameter servers)."""

    def worker_stamps(self, batches: Iterator, num_steps: int) -> tuple[dict[int, list[tuple]], object]:
        """Run num_steps steps per worker; each worker's (fetch start, fetch end, end, pushed) stamps on its
        own clock, and the last loss."""


@runtime_checkable
class TrainsToAccuracy(Protocol):
    """Time to accuracy (benchmarks/run/accuracy.py): labelled input, evaluation and a learning-rate schedule."""

    def labelled_batch(self, images, labels):
        """numpy float32 N x H x W x 3 images and int64 labels -> a device batch for train_step/evaluate, in the
        run's data format."""

    def evaluate(self, batch) -> tuple[int, float]:
        """(correct predictions, summed cross-entropy) of one batch in inference mode (BatchNorm's running
        statistics, no dropout), on this process's replica only: no collective."""

    def set_learning_rate(self, lr: float) -> None:
        """The LR of the following updates (lr_rules.Schedule)."""


T = TypeVar("T")


def of(backend, capability: type[T], missing: str) -> T:
    """`backend` as `capability`, or NotImplementedError saying `missing` (the record's reason)."""
    if not isinstance(backend, capability):
        raise NotImplementedError(missing)
    return backend


def compiles(backend) -> bool:
    """The first step is run apart (CompilesFirstStep) in this run."""
    return isinstance(backend, CompilesFirstStep) and backend.compiles
