"""`bench comm --strategy ps`: pull, push and ps_step of the model's variables through TensorFlow
parameter servers, set up as --strategy ps trains (benchmarks/frameworks/tf_ps.py). What each operation
moves, how every worker stamps it on its own clock and how it is checked: docs/comm.md, "Parameter
servers". Workers and PS run on CPU, as PS training runs them. TF_CONFIG is set by the caller before import.
"""

from __future__ import annotations

from ..frameworks import tf_ps  # first: it quiets TensorFlow's C++ logging before the import

# isort: split

import numpy as np
import tensorflow as tf

from ..distributed import strategies
from ..frameworks.base import DeviceInfo, has_aux_head
from .base import CommBackend

PULL, PUSH, STEP = "pull", "push", "ps_step"


def _pattern(first: float, elements: int):
    """metrics.pattern, made on the device in scope: first + (i mod 7), exact in float32."""
    return first + tf.cast(tf.range(elements) % 7, tf.float32)


def _wrong(values, expected):
    return tf.math.count_nonzero(tf.not_equal(tf.reshape(values, [-1]), expected))


class TFPsBackend(CommBackend):
    framework = "tensorflow"

    @property
    def serves_only(self) -> bool:
        return strategies.get(self.options.strategy).serves_only(self.dist.role)

    def setup(self) -> None:
        tf.config.set_visible_devices([], "GPU")  # every PS-mode process but the chief serves on CPU
        if self.serves_only:
            self.server = tf_ps.start_server()
            return
        from ..frameworks import keras_models

        opts = self.options
        # Graph rewrites off: an identity that moves a tensor to a worker must stay, or a pull's end
        # stamp would wait for the PS's read only, not for the transfer.
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
        # One small function per operation and size, by design: TensorFlow's warning about frequent
        # tracing of "the same" function (one code object) says nothing here.
        tf.get_logger().setLevel("ERROR")
        self.num_workers = strategies.get(opts.strategy).workers(self.dist.world.size, opts.num_ps)
        self.strategy = tf_ps.make_strategy()
        self.device = self._device(0)  # where the buffers are made (each worker its own)
        size = opts.image_size
        with self.strategy.scope(), tf_ps.placement_scope(self.strategy, opts.ps_placement, opts.num_ps):
            self.model = keras_models.build(opts.model, (size, size, 3), 1000, has_aux_head(opts.model, size))
        self.variables = [v.value for v in self.model.variables if v.dtype == tf.float32]
        self._buffers: dict[tuple[int, int], tf.Variable] = {}  # (worker, variable) -> a buffer in the worker's memory
        self._functions: dict[tuple, object] = {}

    def version(self) -> str:
        return tf.__version__

    def device_info(self) -> DeviceInfo:
        from ..results.provenance import cpu_model

        build = tf.sysconfig.get_build_info()
        return DeviceInfo(kind="cpu", name=cpu_model(), count=1, cuda_version=build.get("cuda_version"),
                          cudnn_version=build.get("cudnn_version"), visible_gpus=0)

    # -- what is sent --------------------------------------------------------------------------

    def variable_sizes(self) -> list[tuple[int, int]]:
        """(bytes, PS task) of each float32 variable of the model, in creation order."""
        return [(int(np.prod(v.shape)) * 4, tf_ps.ps_task(v)) for v in self.variables]

    def placement(self) -> list[dict]:
        return tf_ps.ps_loads(self.variables, self.options.num_ps)

    def rule(self) -> str:
        return (f"every float32 variable of the model (trainable and not), in creation order, placed "
                f"{self.options.ps_placement} over {self.options.num_ps} PS as --strategy ps places them")

    # -- the operations ------------------------------------------------------------------------

    def _device(self, worker: int) -> str:
        return f"/job:worker/replica:0/task:{worker}/device:CPU:0"

    def _buffer(self, worker: int, index: int) -> tf.Variable:
        key = (worker, index)
        if key not in self._buffers:
            with tf.device(self._device(worker)):  # made there, never sent
                self._buffers[key] = tf.Variable(tf.zeros(self.variables[index].shape, tf.float32), trainable=False)
        return self._buffers[key]

    def _function(self, op: str, indices: tuple[int, ...], checked: bool):
        """One op over every worker at once, as a function of the workers' and PS's devices: per
        worker its time (end - start stamps) or, `checked`, its wrong elements (pull)."""
        key = (op, indices, checked)
        if key in self._functions:
            return self._functions[key]
        variables = [self.variables[i] for i in indices]
        buffers = {w: [self._buffer(w, i) for i in indices] for w in range(self.num_workers)} if op != PULL else {}

        def one_worker(worker: int):
            device = self._device(worker)
            with tf.device(device):
                start = tf.timestamp()
            arrived = []
            if op in (PULL, STEP):
                with tf.control_dependencies([start]):
                    values = [v.read_value() for v in variables]  # placed with the variable: on its PS
                with tf.device(device):
                    arrived = [tf.identity(value) for value in values]  # in the worker's memory
                    if checked:
                        return tf.add_n([_wrong(value, _pattern(1.0, int(np.prod(v.shape))))
                                         for value, v in zip(arrived, variables)])
            done = arrived
            if op in (PUSH, STEP):
                with tf.device(device), tf.control_dependencies([start, *arrived]):
                    sent = [b.read_value() for b in buffers[worker]]
                done = [v.assign_add(value, read_value=False) for v, value in zip(variables, sent)]  # on the PS
            with tf.device(device), tf.control_dependencies(done):
                end = tf.timestamp()
            return end - start

        function = tf.function(lambda: tf.stack([one_worker(w) for w in range(self.num_workers)]))
        self._functions[key] = function
        return function

    def transfer(self, op: str, indices: tuple[int, ...]) -> list[float]:
        """One operation by every worker at once: each worker's seconds, from its stamps."""
        return [float(t) for t in self._function(op, indices, False)().numpy()]

    def check(self, op: str, indices: tuple[int, ...]) -> int:
        """Wrong elements after one checked operation (untimed), summed over workers, checked as
        docs/comm.md ("Parameter servers") says."""
        if op == STEP:
            return self.check(PULL, indices) + self.check(PUSH, indices)
        variables = [self.variables[i] for i in indices]
        if op == PULL:
            for v in variables:
                with tf.device(v.device):
                    v.assign(tf.reshape(_pattern(1.0, int(np.prod(v.shape))), v.shape))
            return int(tf.reduce_sum(self._function(PULL, indices, True)()).numpy())
        for v in variables:
            with tf.device(v.device):
                v.assign(tf.zeros(v.shape, tf.float32))
        for worker in range(self.num_workers):
            for i in indices:
                buffer = self._buffer(worker, i)
                with tf.device(self._device(worker)):
                    buffer.assign(tf.reshape(_pattern(1.0 + worker, int(np.prod(buffer.shape))), buffer.shape))
        self._function(PUSH, indices, False)()
        n = self.num_workers
        wrong = 0
        for v in variables:
            with tf.device(v.device):  # the sum of every worker's pattern, as metrics.expected_sum
                expected = n * (n + 1) / 2 + n * tf.cast(tf.range(int(np.prod(v.shape))) % 7, tf.float32)
                wrong += int(_wrong(v.read_value(), expected).numpy())
        for worker in range(self.num_workers):  # timed pushes add zeros: the sums never overflow
            for i in indices:
                buffer = self._buffer(worker, i)
                with tf.device(self._device(worker)):
                    buffer.assign(tf.zeros(buffer.shape, tf.float32))
        return wrong

    # -- the CommBackend interface where it does not apply ---------------------------------------

    def buffer(self, values):
        raise NotImplementedError("PS push/pull moves the model's variables (transfer), not buffers")

    def read(self, buffer):
        raise NotImplementedError("PS push/pull moves the model's variables (transfer), not buffers")

    def allreduce(self, buffer):
        raise NotImplementedError("parameter servers have no all-reduce: --strategy ps measures pull, push, ps_step")

    def synchronize(self) -> None:
        """Each operation's result is fetched by the chief: nothing is left queued."""

    def gradient_buckets(self, model: str) -> tuple[list[int], str]:
        raise NotImplementedError("--strategy ps sends variables: variable_sizes()")
