"""TensorFlow under --strategy ps: ParameterServerStrategy, as in seed 000 and tf_cnn_benchmarks.

The chief (process 0) builds the model with its variables on the parameter
servers (round-robin, or greedy by bytes), schedules every worker's steps
through a ClusterCoordinator and measures them; workers and PS tasks only host
a gRPC server (Framework.serves_only). Each step is stamped on the worker that
ran it (tf.timestamp) and timing.loop_from_stamps turns the stamps into that
worker's loop, so a step means what it means in every other strategy.
"""

from __future__ import annotations

import contextlib

from .tf_backend import TensorFlowFramework  # first: it quiets TensorFlow's C++ logging before the import

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from .. import timing  # noqa: E402
from ..distributed.cluster import GreedyPlacer  # noqa: E402
from ..distributed.strategies.ps import PS  # noqa: E402


class TensorFlowPsFramework(TensorFlowFramework):
    def setup(self) -> None:
        if self.serves_only:
            self._configure()
            self._start_server()
            return
        super().setup()

    def _start_server(self) -> None:
        """PS tasks and PS-mode workers host a gRPC server; the chief drives them."""
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        self.server = tf.distribute.Server(
            resolver.cluster_spec(),
            job_name=resolver.task_type,
            task_index=resolver.task_id,
            protocol=resolver.rpc_layer or "grpc",
            start=True,
        )

    def _make_strategy(self):
        return tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())

    @contextlib.contextmanager
    def _variable_scope(self):
        with super()._variable_scope():
            if self.config.ps_placement == "greedy":
                with tf.variable_creator_scope(self._greedy_creator):
                    yield
            else:
                yield

    def _greedy_creator(self, next_creator, **kwargs):
        """Steer ParameterServerStrategy's round-robin counter to the least-loaded PS.

        The strategy places variable k on PS (k mod num_ps); setting k before each
        creation gives greedy placement by bytes. Where each variable really went
        is read back from its device in placement(), so the record shows the truth.
        """
        if not hasattr(self, "_placer"):
            self._placer = GreedyPlacer(self.config.num_ps)
        initial = kwargs.get("initial_value")
        if callable(initial):  # Keras defers initialisers; the size is needed now
            initial = kwargs["initial_value"] = initial()
        size = int(np.prod(initial.shape)) * tf.as_dtype(initial.dtype).size
        self.strategy.extended._variable_count = self._placer.place(size)
        return next_creator(**kwargs)

    def _make_step(self):
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        return tf.function(self._worker_step)

    def placement(self) -> list | None:
        loads = [{"ps": i, "variables": 0, "bytes": 0} for i in range(self.config.num_ps)]
        for variable in [*self.model.variables, *self.optimizer.variables]:
            device = tf.DeviceSpec.from_string(variable.value.device)
            if device.job == PS:
                loads[device.task]["variables"] += 1
                loads[device.task]["bytes"] += int(np.prod(variable.shape)) * tf.as_dtype(variable.dtype).size
        return loads

    def _worker_step(self, iterator):
        """Runs on a worker; reports which worker it was and when it fetched, started and ended."""

        def replica_fn(images, labels):
            loss = self._train_step(images, labels)
            with tf.control_dependencies([loss, *[v.value for v in self.model.trainable_variables]]):
                end = tf.timestamp()
            return end, loss

        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        fetch_start = tf.timestamp()
        images, labels = next(iterator)
        with tf.control_dependencies([images, labels]):
            fetch_end = tf.timestamp()
        end, loss = self.strategy.run(replica_fn, args=(images, labels))
        return worker, fetch_start, fetch_end, end, loss

    def batches(self):
        """Per-worker datasets, built on each worker (real data: each its own shard of the files)."""
        cfg = self.config
        shape = self._image_shape()
        num_workers = self.strategy._num_workers  # noqa: SLF001 - no public accessor

        def dataset_fn(context: tf.distribute.InputContext):
            if cfg.data_dir:
                worker = tf.distribute.coordinator.experimental_get_current_worker_index()
                dataset = self._real_dataset(worker, num_workers)
            else:
                dataset = (
                    tf.data.Dataset.range(cfg.synthetic_batches)
                    .map(
                        lambda i: (
                            tf.random.stateless_normal((cfg.batch_size, *shape), seed=[cfg.seed, i]),
                            tf.random.stateless_uniform(
                                (cfg.batch_size,), seed=[cfg.seed, i], maxval=cfg.num_classes, dtype=tf.int64
                            ),
                        )
                    )
                    .cache()
                    .repeat()
                )
            return dataset.prefetch(tf.data.AUTOTUNE)

        def per_worker_dataset_fn():
            return self.strategy.distribute_datasets_from_function(dataset_fn)

        return iter(self.coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    def timed_loop(self, iterator, num_steps: int, **display) -> timing.TimedLoop:
        """The chief schedules num_steps steps per worker and waits for all of them.

        Steps go asynchronously to whichever worker is free; a worker runs one at a
        time, so its steps, ordered by their end, are consecutive on its own clock.
        A worker's loop starts when its first step starts fetching. No progress lines (display)."""
        num_workers = self.strategy._num_workers  # noqa: SLF001 - no public accessor
        results = [self.coordinator.schedule(self._step, args=(iterator,)) for _ in range(num_steps * num_workers)]
        self.coordinator.join()
        stamps: dict[int, list[tuple[float, float, float]]] = {}
        loss = None
        for remote in results:
            worker, fetch_start, fetch_end, end, loss = (np.asarray(v) for v in remote.fetch())
            stamps.setdefault(int(worker), []).append((float(fetch_start), float(fetch_end), float(end)))
        per_worker = {}
        for worker, steps in sorted(stamps.items()):
            steps.sort(key=lambda step: step[2])
            per_worker[worker] = timing.loop_from_stamps(
                steps[0][0], [(fetched, end) for _, fetched, end in steps], self.config.batch_size
            )
        return timing.merge_loops(per_worker, last_loss=tf.constant(loss))

