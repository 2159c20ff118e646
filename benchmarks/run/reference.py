"""The bare training loop the harness is held against, and the harness ratio (--reference; docs/results.md#headroom).

The loop is what a careful user writes by hand, with nothing of bench around it: the same network (built by the
backend's own model table, so only the loop differs), SGD with momentum 0.9, the run's batch, image size, device and
threads, `synthetic_batches` distinct synthetic batches made on the device and rotated, the loss read back every step
(so each step has finished before the next starts, which bench ensures by synchronising the device) and the device
synchronised at both ends of the clock. No per-step stamps, progress, stop checks, peaks or energy.

bench --reference runs it in the worker beside the timed repeats, paired with them (Interleaved); perf/harness_overhead.py
runs it in a fresh process of its own (images_per_sec). This is its one home; what it cannot match, and so what
--reference refuses, is config.reference_refusal (config is below the frameworks this module builds on). The
frameworks are imported inside the builders: bench's CLI imports this module (lazily, for check_launch) before any
framework.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from ..core.errors import Stopped, UsageError

NOT_ASKED = "no reference loop ran: --reference runs one beside the timed repeats"
MOMENTUM = 0.9


def multi_rank_reason(processes: int) -> str:
    return (f"not measured on a run of {processes} processes: the bare loop is one process's loop (--reference runs "
            f"it on one; perf/harness_overhead.py likewise)")


def check_launch(processes: int, find_max_batch: bool) -> None:
    """What bench refuses before anything runs (one line, exit 2)."""
    if processes > 1:
        raise UsageError(f"--reference runs one process's bare loop; this launch has {processes} ranks: run it "
                         f"without a launcher")
    if find_max_batch:
        raise UsageError("--reference holds a second copy of the model in memory: a batch search under it would "
                         "find half the batch; search without it")


@dataclass
class BareLoop:
    """One framework's hand-written loop, built and ready. `step(i)` trains on batch i (mod the batches) and reads
    the loss back; `traces`: the first step traces a graph, run apart like bench's own first step."""

    step: Callable[[int], None]
    synchronize: Callable[[], None]
    batch_size: int
    traces: bool = False
    done: int = 0  # steps run so far: the batches rotate across calls, as bench's cycle does

    def run(self, steps: int) -> float:
        """Seconds for `steps` steps, the device synchronised at both ends."""
        self.synchronize()
        start = time.perf_counter()
        for index in range(self.done, self.done + steps):
            self.step(index)
        self.synchronize()
        self.done += steps
        return time.perf_counter() - start

    def warm_up(self, steps: int) -> None:
        if self.traces:
            self.run(1)
        if steps:
            self.run(steps)

    def images_per_sec(self, steps: int) -> float:
        return self.batch_size * steps / self.run(steps)


def torch_loop(model: str, batch_size: int, image_size: int, *, num_classes: int = 1000, lr: float = 0.01,
               synthetic_batches: int = 4, seed: int = 0, device=None, num_threads: Optional[int] = None) -> BareLoop:
    """`device`: a torch.device (bench's own); None: the CPU. `num_threads`: set process-wide (a process of its own)."""
    import torch

    from ..frameworks.base import has_aux_head
    from ..frameworks.torch_backend import build_model, training_loss

    if num_threads:
        torch.set_num_threads(num_threads)
    device = device or torch.device("cpu")
    aux = has_aux_head(model, image_size)
    net = build_model(model, num_classes, aux, image_size, seed).to(device).train()
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=MOMENTUM)
    generator = torch.Generator().manual_seed(seed)
    batches = [(torch.randn(batch_size, 3, image_size, image_size, generator=generator).to(device),
                torch.randint(0, num_classes, (batch_size,), generator=generator).to(device))
               for _ in range(synthetic_batches)]

    def step(index: int) -> None:
        images, labels = batches[index % synthetic_batches]
        optimizer.zero_grad(set_to_none=True)
        loss = training_loss(net(images), labels, aux)
        loss.backward()
        optimizer.step()
        loss.item()

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return BareLoop(step, synchronize, batch_size)


def tensorflow_loop(model: str, batch_size: int, image_size: int, *, num_classes: int = 1000, lr: float = 0.01,
                    synthetic_batches: int = 4, seed: int = 0, device: Optional[str] = None,
                    num_threads: Optional[int] = None) -> BareLoop:
    """`device`: a TensorFlow device name (bench's own); None: TensorFlow's choice. `num_threads`: set process-wide,
    which TensorFlow allows only before its first operation (a process of its own)."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import contextlib

    import keras
    import tensorflow as tf

    from ..frameworks import keras_models
    from ..frameworks.base import AUX_LOSS_WEIGHT, has_aux_head

    if num_threads:
        tf.config.threading.set_intra_op_parallelism_threads(num_threads)
        tf.config.threading.set_inter_op_parallelism_threads(num_threads)
    aux = has_aux_head(model, image_size)
    placed = tf.device(device) if device else contextlib.nullcontext()
    with placed:
        net = keras_models.build(model, (image_size, image_size, 3), num_classes, aux, seed)
        optimizer = keras.optimizers.SGD(learning_rate=lr, momentum=MOMENTUM)
        rng = tf.random.Generator.from_seed(seed)
        batches = [(rng.normal((batch_size, image_size, image_size, 3)),
                    rng.uniform((batch_size,), 0, num_classes, dtype=tf.int64)) for _ in range(synthetic_batches)]
    cross_entropy = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train(images, labels):
        with tf.GradientTape() as tape:
            outputs = net(images, training=True)
            loss = (cross_entropy(labels, outputs[0]) + AUX_LOSS_WEIGHT * cross_entropy(labels, outputs[1]) if aux
                    else cross_entropy(labels, outputs))
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables))
        return loss

    def step(index: int) -> None:
        train(*batches[index % synthetic_batches]).numpy()

    gpu = bool(tf.config.list_logical_devices("GPU")) and (device is None or "GPU" in device.upper())

    def synchronize() -> None:
        if gpu:  # a CPU tf.function call has finished when it returns
            tf.test.experimental.sync_devices()

    return BareLoop(step, synchronize, batch_size, traces=True)


BUILDERS = {"torch": torch_loop, "tensorflow": tensorflow_loop}
DEVICE_ATTRIBUTES = {"torch": "device", "tensorflow": "device_name"}  # where each bench backend keeps its device


def images_per_sec(framework: str, model: str, batch_size: int, image_size: int, warmup: int, steps: int,
                   num_threads: int, synthetic_batches: int = 4) -> float:
    """The bare loop alone in this process, on the CPU (perf/harness_overhead.py's --bare side)."""
    loop = BUILDERS[framework](model, batch_size, image_size, synthetic_batches=synthetic_batches,
                               num_threads=num_threads)
    loop.warm_up(warmup)
    return loop.images_per_sec(steps)


def for_backend(backend, config) -> BareLoop:
    """The bare loop of a set-up bench backend's run, on its device, in its process (threads and math as it set them)."""
    if backend.name not in BUILDERS:  # a framework without a bare loop here: the record says so, bench stands
        raise NotImplementedError(f"{backend.name} has no bare loop (benchmarks/run/reference.py's BUILDERS)")
    device = getattr(backend, DEVICE_ATTRIBUTES[backend.name], None)
    return BUILDERS[backend.name](config.model, config.batch_size, config.image_size, num_classes=config.num_classes,
                                  lr=config.base_lr, synthetic_batches=config.synthetic_batches, seed=config.seed,
                                  device=device)


class Interleaved:
    """The bare loop timed beside bench's repeats, one bare loop per repeat: pair i is repeat i and the bare loop run
    next to it, the bare loop first in odd-numbered pairs so that a drift (heat, a neighbour's load) falls on both
    sides alike. Its warmup (and TensorFlow's tracing step) ran before, untimed. A failure of the bare loop (it holds
    a second model: memory) ends the pairing with its reason; bench's measurement stands."""

    def __init__(self, make: Callable[[], BareLoop], warmup: int, steps: int, warn: Callable[[str], None] = print):
        self.steps, self.warn = steps, warn
        self.bare: dict[int, float] = {}  # the bare loop's images/sec by repeat index
        self.reason: Optional[str] = None  # why the pairing ended early
        self.loop = self._guarded(lambda: self._warm(make(), warmup))

    @staticmethod
    def _warm(loop: BareLoop, warmup: int) -> BareLoop:
        loop.warm_up(warmup)
        return loop

    def _guarded(self, work):
        try:
            return work()
        except Stopped:
            raise
        except Exception as error:  # noqa: BLE001 - bench's own measurement stands without its reference
            text = str(error).splitlines()[0][:300] if str(error) else ""
            self.reason = f"the bare loop failed: {type(error).__name__}: {text}"
            self.loop = None
            self.warn(self.reason)
            return None

    @staticmethod
    def bare_first(index: int) -> bool:
        return index % 2 == 1

    def time(self, index: int) -> Optional[float]:
        """The bare loop's images/sec beside repeat `index` (None once it has failed)."""
        if self.loop is None:
            return None
        rate = self._guarded(lambda: self.loop.images_per_sec(self.steps))
        if rate is not None:
            self.bare[index] = rate
        return rate

    def section(self, bench: list[float]) -> dict:
        """The record's `reference` from bench's images/sec per repeat (this process's loops)."""
        pairs = [(rate, self.bare[index]) for index, rate in enumerate(bench) if index in self.bare]
        return section(pairs, self.reason)


def section(pairs: list[tuple[float, float]], failed: Optional[str] = None) -> dict:
    """The harness ratio from (bench, bare) images/sec pairs: the mean of the per-pair ratios with a 95% t-interval
    over them (a ratio per pair, so that what drifts between pairs cancels within each)."""
    from ..measure.stats import Stats, t_halfwidth

    if not pairs:
        return unavailable(failed or "no pair completed: the run stopped before a bare loop ran beside a repeat")
    ratios = [bench / bare for bench, bare in pairs]
    return {"ratio": Stats.of(ratios).mean, "ci95_halfwidth": t_halfwidth(ratios), "pairs": len(pairs),
            "bare_images_per_sec": Stats.of([bare for _, bare in pairs]).mean,
            "per_pair": [{"bench_images_per_sec": bench, "bare_images_per_sec": bare, "ratio": bench / bare}
                         for bench, bare in pairs],
            "reason": failed}


def unavailable(reason: str) -> dict:
    return {"ratio": None, "ci95_halfwidth": None, "pairs": 0, "bare_images_per_sec": None, "per_pair": [],
            "reason": reason}


def not_run(processes: int) -> dict:
    """A run without --reference (or of several processes): why the record has no ratio."""
    return unavailable(multi_rank_reason(processes) if processes > 1 else NOT_ASKED)
