"""`bench --tensorboard DIR`: per-step throughput and loss as TensorBoard scalars, written after the
timed loops, never inside them, by the first writer found (docs/reports.md says which and what it costs).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from pathlib import Path

from ..core import durable

# (module that must be importable, name) in order of preference
BACKENDS = (("tensorboardX", "tensorboardX"), ("tensorboard", "torch.utils.tensorboard"), ("tensorflow", "tf.summary"))


def available() -> str | None:
    for module, name in BACKENDS:
        try:
            if importlib.util.find_spec(module) is not None:
                return name
        except (ImportError, ValueError):
            continue
    return None


class Writer:
    def __init__(self, logdir: str | Path):
        self.name = available()
        Path(logdir).mkdir(parents=True, exist_ok=True)
        if self.name in ("tensorboardX", "torch.utils.tensorboard"):
            self._writer = importlib.import_module(self.name).SummaryWriter(str(logdir))
        elif self.name == "tf.summary":
            import tensorflow as tf
            from tensorflow.core.framework import summary_pb2

            # tf.summary.scalar needs the tensorboard package; the core op tf.summary.write does
            # not. The metadata is what tensorboard's own scalar summary attaches.
            metadata = summary_pb2.SummaryMetadata(data_class=summary_pb2.DATA_CLASS_SCALAR)
            metadata.plugin_data.plugin_name = "scalars"
            self._tf, self._metadata = tf, metadata
            self._writer = tf.summary.create_file_writer(str(logdir))
        else:
            raise RuntimeError("no TensorBoard writer installed (tensorboardX, tensorboard or tensorflow)")

    def scalar(self, tag: str, value: float, step: int, walltime: float | None = None) -> None:
        """`walltime`: when the value was taken (Unix seconds); tf.summary can only stamp the write time."""
        if self.name == "tf.summary":
            with self._writer.as_default():
                self._tf.summary.write(tag, self._tf.constant(float(value), self._tf.float32), step=step,
                                       metadata=self._metadata)
        else:
            self._writer.add_scalar(tag, value, step, walltime=walltime)

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()


@contextlib.contextmanager
def nothing_half_written(logdir: str | Path):
    """On a file system that takes no more (durable.room_problem), what this writer made in `logdir` goes (a
    TensorBoard folder holds other runs' events too: those stay) and the failure is durable.NoRoom."""
    root = Path(logdir)
    before = set(root.rglob("*")) if root.exists() else None
    try:
        yield
    except Exception as error:
        room = durable.room_problem(error, root)
        if room is None:
            raise
        for path in sorted(set(root.rglob("*")) - (before or set()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                path.rmdir() if path.is_dir() else path.unlink()
        if before is None:
            with contextlib.suppress(OSError):
                root.rmdir()
        raise durable.NoRoom(repr(str(root)), room, "the measurement is kept; ") from None


def write_loops(logdir: str | Path, loops, images_per_step: int, loss_value) -> None:
    """One event per timed step: images/sec of this process (batch / step time) and loss.
    Steps are numbered across repeats from 0; warmup steps are not written."""
    writer = Writer(logdir)
    try:
        step = 0
        for repeat, loop in enumerate(loops):
            losses = loop.losses or [None] * len(loop.step_times_s)
            for seconds, loss in zip(loop.step_times_s, losses):
                writer.scalar("throughput/images_per_sec", images_per_step / seconds, step)
                if loss is not None:
                    writer.scalar("train/loss", loss_value(loss), step)
                step += 1
    finally:
        writer.close()


CURVE_SCALARS = {"val_accuracy": "eval/accuracy", "val_loss": "eval/loss", "train_loss": "train/loss", "lr": "train/lr",
                 "epoch": "train/epoch"}


def write_curve(logdir: str | Path, curve: list[dict], started_unix: float) -> None:
    """A time-to-accuracy curve (accuracy.py): one event per evaluation, its step the training images
    seen so far, its wall time when the evaluation ended (the run's clock start + its time)."""
    writer = Writer(logdir)
    try:
        for point in curve:
            for field, tag in CURVE_SCALARS.items():
                if point[field] is not None:
                    writer.scalar(tag, point[field], point["samples"], walltime=started_unix + point["wall_time_s"])
    finally:
        writer.close()
