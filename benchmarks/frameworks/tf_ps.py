"""TensorFlow under --strategy ps: ParameterServerStrategy, as in seed 000 and tf_cnn_benchmarks.

The chief (process 0) builds the model with its variables on the parameter
servers (round-robin, or greedy by bytes), schedules every worker's steps
through a ClusterCoordinator and measures them; workers and PS tasks only host
a gRPC server (Framework.serves_only). Each step is stamped on the worker that
ran it (tf.timestamp) and timing.loop_from_stamps turns the stamps into that
worker's loop, so a step means what it means in every other strategy. Each step
also stamps `pushed`, when its gradients were applied on every PS: bench --trace tells
the push from idle time by it (docs/results.md, --trace).
The variable placement and the PS/worker server are module functions, shared with
`bench comm --strategy ps` (benchmarks/comm/tf_ps_comm.py).
"""

from __future__ import annotations

import contextlib
import queue
import threading

from .tf_backend import TensorFlowFramework  # first: it quiets TensorFlow's C++ logging before the import

# isort: split

import numpy as np
import tensorflow as tf

from ..core.errors import Stopped
from ..distributed.cluster import GreedyPlacer
from ..distributed.strategies.ps import PS
from ..measure import timing
from ..measure.trace import PUSHED


def start_server() -> tf.distribute.Server:
    """PS tasks and PS-mode workers host a gRPC server from TF_CONFIG; the chief drives them."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
                                protocol=resolver.rpc_layer or "grpc", start=True)


def make_strategy() -> tf.distribute.ParameterServerStrategy:
    return tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())


@contextlib.contextmanager
def placement_scope(strategy, ps_placement: str, num_ps: int):
    """Variables created inside go to the PS as training places them: ParameterServerStrategy's
    round-robin, or greedy by bytes (tf_cnn_benchmarks' load balancing, seed 000).

    The strategy places variable k on PS (k mod num_ps); setting k before each creation gives
    greedy placement. Where each variable really went is read back from its device
    (ps_loads), so records show the truth."""
    if ps_placement != "greedy":
        yield
        return
    placer = GreedyPlacer(num_ps)

    def creator(next_creator, **kwargs):
        initial = kwargs.get("initial_value")
        if callable(initial):  # Keras defers initialisers; the size is needed now
            initial = kwargs["initial_value"] = initial()
        size = int(np.prod(initial.shape)) * tf.as_dtype(initial.dtype).size
        strategy.extended._variable_count = placer.place(size)  # noqa: SLF001 - the strategy's own counter
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        yield


def ps_task(variable) -> int | None:
    """The PS task holding a (tf or Keras) variable; None when it lives elsewhere."""
    inner = variable if isinstance(variable, tf.Variable) else variable.value  # Keras 3 wraps a tf.Variable
    device = tf.DeviceSpec.from_string(inner.device)
    return device.task if device.job == PS else None


def ps_loads(variables, num_ps: int) -> list[dict]:
    """Variables and bytes per PS, read back from where the variables are."""
    loads = [{"ps": i, "variables": 0, "bytes": 0} for i in range(num_ps)]
    for variable in variables:
        task = ps_task(variable)
        if task is not None:
            loads[task]["variables"] += 1
            loads[task]["bytes"] += int(np.prod(variable.shape)) * tf.as_dtype(variable.dtype).size
    return loads


class TensorFlowPsFramework(TensorFlowFramework):
    def setup(self) -> None:
        if self.serves_only:
            self._configure()
            self.server = start_server()
            return
        super().setup()
        if self.config.accuracy_mode:
            with self._variable_scope():  # on a PS: every worker's update counts it
                self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="dlbench_updates")
            self._labelled_step = tf.function(self._labelled_worker_step)
            self.staleness = []

    def _make_strategy(self):
        return make_strategy()

    def collective_library(self, gpu: bool) -> str | None:
        return "grpc"  # the workers' variables live on the parameter servers, reached over TF's gRPC server

    def collective(self) -> tuple[str | None, str | None]:
        return "grpc", "ParameterServerStrategy (grpc)"

    @contextlib.contextmanager
    def _variable_scope(self):
        with super()._variable_scope(), placement_scope(self.strategy, self.config.ps_placement, self.config.num_ps):
            yield

    def _make_step(self):
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        return tf.function(self._worker_step)

    def placement(self) -> list | None:
        return ps_loads([*self.model.variables, *self.optimizer.variables], self.config.num_ps)

    def _worker_step(self, iterator):
        """Runs on a worker; reports which worker it was and when it fetched, ended, and saw its
        gradients applied on every PS."""

        def replica_fn(images, labels):
            loss = self._train_step(images, labels)
            with tf.control_dependencies([loss, *[v.value for v in self.model.trainable_variables]]):
                end = tf.timestamp()
            with tf.control_dependencies(self._pushed_probes()):
                pushed = tf.timestamp()
            return end, pushed, loss

        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        fetch_start = tf.timestamp()
        images, labels = next(iterator)
        with tf.control_dependencies([images, labels]):
            fetch_end = tf.timestamp()
        end, pushed, loss = self.strategy.run(replica_fn, args=(images, labels))
        return worker, fetch_start, fetch_end, end, pushed, loss

    def _pushed_probes(self) -> list:
        """Per PS, one scalar computed there from the first element of each of its variables, read
        after the step's update (reads follow writes of a variable in a tf.function): it arrives on
        the worker once that PS has applied the step's gradients. A few bytes, not a pull."""
        by_task: dict[str, list] = {}
        for variable in self.model.trainable_variables:
            by_task.setdefault(variable.value.device, []).append(variable.value)
        probes = []
        for device, variables in sorted(by_task.items()):
            with tf.device(device):
                firsts = [tf.cast(tf.reshape(v.read_value(), [-1])[:1], tf.float32) for v in variables]
                probes.append(tf.reduce_sum(tf.concat(firsts, 0), name=PUSHED))
        return probes

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
                def synthetic(i):
                    return (tf.random.stateless_normal((cfg.batch_size, *shape), seed=[cfg.seed, i]),
                            tf.random.stateless_uniform((cfg.batch_size,), seed=[cfg.seed, i], maxval=cfg.num_classes,
                                                        dtype=tf.int64))

                dataset = tf.data.Dataset.range(cfg.synthetic_batches).map(synthetic).cache().repeat()
            return dataset.prefetch(tf.data.AUTOTUNE)

        def per_worker_dataset_fn():
            return self.strategy.distribute_datasets_from_function(dataset_fn)

        return iter(self.coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    def worker_stamps(self, iterator, num_steps: int) -> tuple[dict[int, list[tuple]], object]:
        """The chief schedules num_steps steps per worker and waits for all of them; per worker, its
        steps' (fetch start, fetch end, end, pushed) stamps in order, and the last loss.

        Steps go asynchronously to whichever worker is free; a worker runs one at a
        time, so its steps, ordered by their end, are consecutive on its own clock."""
        results = self._schedule(iterator, num_steps)
        self.coordinator.join()
        return by_worker([remote.fetch() for remote in results])

    def _schedule(self, iterator, num_steps: int, then=lambda remote: None) -> list:
        """num_steps steps per worker, each to whichever worker is free; `then(remote)` as each is queued."""
        num_workers = self.strategy._num_workers  # noqa: SLF001 - no public accessor
        results = []
        for _ in range(num_steps * num_workers):
            results.append(self.coordinator.schedule(self._step, args=(iterator,)))
            then(results[-1])
        return results

    def _labelled_worker_step(self, images, labels):
        """One asynchronous update from a batch the chief sent, on whichever worker is free; its
        staleness: the updates applied by others between this step's read of the weights (after
        reading the counter) and its own update (the counter's increment after applying)."""

        def replica_fn(images, labels):
            read = self.updates.read_value()
            with tf.control_dependencies([read]):
                images = tf.identity(images)  # the forward pass reads the weights after the counter
            loss = self._train_step(images, labels)
            with tf.control_dependencies([loss, *[v.value for v in self.model.trainable_variables]]):
                end = tf.timestamp()
                applied = self.updates.assign_add(1, read_value=True)
            return end, loss, applied - read - 1

        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        start = tf.timestamp()
        end, loss, stale = self.strategy.run(replica_fn, args=(images, labels))
        return worker, start, end, loss, stale

    def labelled_loop(self, batches, num_updates: int, before_update) -> timing.TimedLoop:
        """The chief deals the batches; each update goes to the first free worker. Each worker's loop
        comes from its own stamps (timing.loop_from_stamps), as in timed_loop."""
        scheduled = []
        with quiet_when_stopped():  # a stop loses this block (the finished ones are kept: benchmarks/run/accuracy.py)
            for _ in range(num_updates):
                before_update()
                scheduled.append(self.coordinator.schedule(self._labelled_step, args=next(batches)))
            self.coordinator.join()
        stamps: dict[int, list[tuple]] = {}
        losses = []
        for remote in scheduled:
            worker, start, end, loss, stale = (np.asarray(v) for v in remote.fetch())
            stamps.setdefault(int(worker), []).append((float(start), float(end)))
            losses.append(loss)
            self.staleness.append(int(stale))
        per_worker = {}
        for worker, steps in sorted(stamps.items()):
            steps.sort(key=lambda step: step[1])
            per_worker[worker] = timing.loop_from_stamps(steps[0][0], steps, self.config.batch_size,
                                                         fetch_started=[s for s, _ in steps])
        merged = timing.merge_loops(per_worker, last_loss=losses[-1])
        merged.losses = losses
        return merged

    def timed_loop(self, iterator, num_steps: int, display_every: int = 0, display=None) -> timing.TimedLoop:
        """A worker's loop starts when its first step starts fetching; a step's input wait is its own
        fetch (the time before it, waiting for the previous step's push and the chief's next step,
        stays in the step). Each step's stamps come to the chief as it ends (fetch_in_order: what a stop keeps), and
        with them the progress lines: every `display_every` steps per worker, the rate over those steps as the chief
        sees them end, from a thread of its own (nothing is added to a step)."""
        num_workers = self.strategy._num_workers  # noqa: SLF001 - no public accessor
        every = display_every * num_workers if display is not None else 0
        scheduled: queue.SimpleQueue = queue.SimpleQueue()
        ended: list = []  # the steps' stamps, fetched in scheduling order as they end

        def fetch_in_order() -> None:
            """Each step's stamps onto the chief as soon as it ends (a copy of five scalars from its worker), in the
            order the steps were queued, until None: on a stop the workers go at the same moment as the chief, and
            their steps' results with them. Ends at the first step that failed or was cancelled: the steps before
            it are what was measured."""
            shown = timing.clock()
            while (remote := scheduled.get()) is not None:
                try:
                    ended.append(remote.fetch())
                except Exception:  # noqa: BLE001 - the loop's own error (or the stop) is what the run reports
                    return
                if every and len(ended) % every == 0:
                    now = timing.clock()
                    display(len(ended) // num_workers, every * self.config.batch_size / (now - shown), ended[-1][-1])
                    shown = now

        threading.Thread(target=fetch_in_order, name="ps-stamps", daemon=True).start()
        try:
            with quiet_when_stopped():
                results = self._schedule(iterator, num_steps, scheduled.put)  # the first steps run while the rest queue
                scheduled.put(None)
                self.coordinator.join()
        except Stopped as stop:  # the chief unwinds (benchmarks/run/worker.py): the steps fetched by now are kept
            stop.loop = self._merged(*by_worker(ended[:])) if ended else None
            raise
        return self._merged(*by_worker([remote.fetch() for remote in results]))

    def _merged(self, stamps: dict[int, list[tuple]], loss) -> timing.TimedLoop:
        per_worker = {worker: timing.loop_from_stamps(steps[0][0], [(fetched, end) for _, fetched, end, _ in steps],
                                                      self.config.batch_size, fetch_started=[s[0] for s in steps])
                      for worker, steps in sorted(stamps.items())}
        return timing.merge_loops(per_worker, last_loss=tf.constant(loss))


@contextlib.contextmanager
def quiet_when_stopped():
    """A stop of the chief (it unwinds: benchmarks/run/worker.py) takes the workers with it: the coordinator's threads
    would log each one lost as an ERROR, which it is not."""
    try:
        yield
    except Stopped:
        tf.get_logger().setLevel("CRITICAL")
        raise


def by_worker(fetched: list) -> tuple[dict[int, list[tuple]], object]:
    """Per worker, its steps' (fetch start, fetch end, end, pushed) stamps ordered by their end, and the last loss."""
    stamps: dict[int, list[tuple]] = {}
    loss = None
    for values in fetched:
        worker, *stamped, loss = (np.asarray(v) for v in values)
        stamps.setdefault(int(worker), []).append(tuple(float(v) for v in stamped))
    for steps in stamps.values():
        steps.sort(key=lambda step: step[2])
    return stamps, loss
