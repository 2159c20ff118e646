"""TensorFlow backend: Keras models, a custom tf.function train step, tf.data input.

`model.fit` is avoided on purpose: it warms up slowly, hides the step boundary
and fails under ParameterServerStrategy; a tf.function step is what
tf_cnn_benchmarks-style measurement needs.
TF_CONFIG is exported by the measurement before this module is imported.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from . import tf_setup  # noqa: F401 - before TensorFlow

# isort: split

import keras
import numpy as np
import tensorflow as tf

from ..core.errors import UsageError
from ..data.dataset import image_folder
from ..measure import compilation, precision, step_timing
from ..tta import lr_rules
from . import gemm, keras_models
from .base import AUX_LOSS_WEIGHT, AllocatorPeaks, DeviceInfo, Framework, checksum, has_aux_head, looks_like_oom

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


COUNTED_OPS = ("Conv2D", "MatMul", "BatchMatMulV2", "DepthwiseConv2dNative")  # as torch's FlopCounterMode


def count_forward_flops(model, image_shape: tuple):
    """Forward FLOPs per image from the registered statistics of the traced training-mode graph
    (convolutions and matrix products, 2 per multiply-add): a trace, no compute."""
    from tensorflow.python.framework import ops  # the statistics registry tf.profiler reads

    from ..measure.flops import Counted

    graph = tf.function(lambda x: model(x, training=True)).get_concrete_function(
        tf.TensorSpec([1, *image_shape], tf.float32)).graph
    total = 0
    for op in graph.get_operations():
        if op.type in COUNTED_OPS:
            total += ops.get_stats_for_node_def(graph, op.node_def, "flops").value or 0
    return Counted(float(total), None, f"TensorFlow registered op statistics of the traced graph ({', '.join(COUNTED_OPS)})")


def all_reduce_strategy(gpu: bool) -> tf.distribute.MultiWorkerMirroredStrategy:
    """MultiWorkerMirroredStrategy: NCCL when this worker has a GPU, TF's own ring otherwise."""
    implementation = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(implementation=implementation.NCCL if gpu else implementation.RING)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


class TensorFlowFramework(Framework):
    name = "tensorflow"

    def version(self) -> str:
        return tf.__version__

    def setup(self) -> None:
        cfg = self.config
        self._configure()
        keras.utils.set_random_seed(cfg.seed)
        if cfg.data_format == "channels_first" and not self.gpus:
            raise UsageError(
                "--data-format channels_first: TensorFlow's CPU convolutions support only channels_last"
            )
        keras.config.set_image_data_format(cfg.data_format)
        plan = precision.plan(cfg.precision, "gpu" if self.gpus else "cpu")
        self.precision_state = precision.apply_tensorflow(plan, self._gpu_details())
        self.step_timing_state = step_timing.section(cfg.step_timing, None)  # the host clock (framework_specs)
        self.fp16 = plan.loss_scaling
        self.aux_head = has_aux_head(cfg.model, cfg.image_size)
        self.strategy = self._make_strategy()
        self.hvd = None
        with self._variable_scope():
            self.model = keras_models.build(cfg.model, self._image_shape(), cfg.num_classes, self.aux_head, cfg.seed)
            optimizer = keras.optimizers.SGD(learning_rate=cfg.base_lr, momentum=0.9)
            self.optimizer = keras.optimizers.LossScaleOptimizer(optimizer) if self.fp16 else optimizer
            self.optimizer.build(self.model.trainable_variables)
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="sum_over_batch_size"
        )
        self._init_distributed()
        self._step = self._make_step()
        self._eval_step = tf.function(self._eval_counts, reduce_retracing=True)

    def _configure(self) -> None:
        """Threads and device: what every process needs, serving ones included."""
        cfg = self.config
        if cfg.num_threads:
            tf.config.threading.set_intra_op_parallelism_threads(cfg.num_threads)
            tf.config.threading.set_inter_op_parallelism_threads(cfg.num_threads)
        self._pick_device(cfg.device)

    @property
    def compiles(self) -> bool:
        return True  # every step is a tf.function: the first traces it (and compiles it, with XLA)

    def compile_step(self, batches) -> None:
        """The first step, which traces the tf.function (and compiles it with XLA), timed on its own."""
        seconds = self.timed_loop(batches, 1).wall_time_s
        xla = getattr(self._step, "_jit_compile", None) is True  # what the step was really built with
        self.compile_state = compilation.section("xla" if xla else "graph", "xla" if xla else "tf.function", seconds)

    def _make_step(self):
        return tf.function(self._train_step, jit_compile=self.config.xla, reduce_retracing=True)

    def count_flops(self):
        return count_forward_flops(self.model, self._image_shape())

    def gemm_factory(self, math: str):
        return gemm.tensorflow_factory(self.device_name, math)

    def _init_distributed(self) -> None:
        """Join the other ranks' gradient exchange (the strategy's subclass); alone: nothing."""

    # -- devices and strategies ------------------------------------------------------------------

    def _pick_device(self, wanted: str) -> None:
        gpus = tf.config.list_physical_devices("GPU")
        if wanted == "gpu" and not gpus:
            raise UsageError("--device gpu but TensorFlow sees no GPU (choices here: auto, cpu)")
        if (wanted == "cpu" or self.serves_only) and gpus:
            tf.config.set_visible_devices([], "GPU")
            gpus = []
        if gpus:
            self.gpu_index = self.gpu_ordinal(len(gpus))
            gpus = [gpus[self.gpu_index]]
            tf.config.set_visible_devices(gpus, "GPU")
            # Grow on demand so device-level (NVML) peaks reflect use, not TF's upfront grab.
            tf.config.experimental.set_memory_growth(gpus[0], True)
        self.gpus = gpus
        self.device_name = "/GPU:0" if gpus else "/CPU:0"

    def visible_gpus(self) -> int | None:
        return len(tf.config.list_physical_devices("GPU"))  # allowed before the threads are set (_configure)

    def _make_strategy(self):
        """A tf.distribute strategy (the strategy's subclass); alone: none, the model on one device."""
        return None

    def _variable_scope(self) -> contextlib.AbstractContextManager:
        return tf.device(self.device_name) if self.strategy is None else self.strategy.scope()

    def _image_shape(self) -> tuple:
        s = self.config.image_size
        return (3, s, s) if self.config.data_format == "channels_first" else (s, s, 3)

    # -- facts -----------------------------------------------------------------------------------

    def model_info(self) -> dict:
        return {
            "parameters": int(sum(np.prod(v.shape) for v in self.model.trainable_variables)),
            "aux_head": self.aux_head,
        }

    def _gpu_details(self) -> dict | None:
        return tf.config.experimental.get_device_details(self.gpus[0]) if self.gpus else None

    def device_info(self) -> DeviceInfo:
        from ..results.provenance import cpu_model

        build = tf.sysconfig.get_build_info()
        return DeviceInfo(
            kind="gpu" if self.gpus else "cpu",
            name=self._gpu_details().get("device_name", self.gpus[0].name) if self.gpus else cpu_model(),
            count=1,
            cuda_version=build.get("cuda_version"),
            cudnn_version=build.get("cudnn_version"),
            visible_gpus=len(tf.config.list_physical_devices("GPU")),
            ordinals=(self.gpu_index,) if self.gpus else (),
            intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads() or None,
        )

    def parameter_checksum(self) -> str:
        return checksum(np.asarray(variable.value.read_value(), dtype=np.float32)
                        for variable in self.model.trainable_variables)

    # -- training --------------------------------------------------------------------------------

    def _loss(self, outputs, labels):
        if self.aux_head:
            logits, aux = outputs
            return self.loss_fn(labels, tf.cast(logits, tf.float32)) + AUX_LOSS_WEIGHT * self.loss_fn(
                labels, tf.cast(aux, tf.float32)
            )
        return self.loss_fn(labels, tf.cast(outputs, tf.float32))

    def _train_step(self, images, labels):
        with tf.GradientTape() as tape:
            loss = self._loss(self.model(images, training=True), labels)
            if self.strategy is not None:  # gradients are summed over replicas: average them
                loss_for_grad = loss / self.strategy.num_replicas_in_sync
            else:
                loss_for_grad = loss
            scaled = self.optimizer.scale_loss(loss_for_grad) if self.fp16 else loss_for_grad
        variables = self.model.trainable_variables
        if self.hvd is not None:
            tape = self.hvd.DistributedGradientTape(tape)
            gradients = tape.gradient(scaled, [v.value for v in variables])
        else:
            gradients = tape.gradient(scaled, variables)
        if self.uses_lars:
            gradients = self._apply_lars(gradients, variables)
        self.optimizer.apply_gradients(zip(gradients, variables))
        return loss

    def _apply_lars(self, gradients, variables) -> list:
        """lr_rules.lars_factor per layer, from the gradient every replica applies (_lars_reference), unscaled."""
        reference = self._lars_reference(gradients)
        if self.fp16:
            reference = [g / self.optimizer.dynamic_scale for g in reference]
        lr = tf.cast(self.optimizer.learning_rate, tf.float32)
        return [g * lr_rules.lars_factor(tf.norm(v), tf.norm(r), lr, tf.minimum, tf.where)
                if lr_rules.lars_applies(v.shape) else g
                for g, r, v in zip(gradients, reference, variables)]

    def _lars_reference(self, gradients) -> list:
        """The gradient the optimizer will apply, up to a common factor: this one, already averaged (Horovod)
        or the only one (alone)."""
        return gradients

    # -- time to accuracy ------------------------------------------------------------------------

    def labelled_batch(self, images, labels):
        if self.config.data_format == "channels_first":
            images = images.transpose(0, 3, 1, 2)
        with tf.device(self.device_name):
            return tf.constant(images), tf.constant(labels)

    def _eval_counts(self, images, labels):
        outputs = self.model(images, training=False)
        logits = tf.cast(outputs[0] if self.aux_head else outputs, tf.float32)
        loss = tf.reduce_sum(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1), labels), tf.int64))
        return correct, loss

    def evaluate(self, batch) -> tuple[int, float]:
        correct, loss = self._eval_step(*batch)
        return int(correct), float(loss)

    def set_learning_rate(self, lr: float) -> None:
        self.optimizer.learning_rate = lr  # assigns the optimizer's LR variable (the inner one under loss scaling)

    # -- input -----------------------------------------------------------------------------------

    def synthetic_batches(self) -> list:
        cfg = self.config
        rng = tf.random.Generator.from_seed(cfg.seed + self.dist.world.rank)
        with tf.device(self.device_name):
            return [
                (
                    rng.normal((cfg.batch_size, *self._image_shape())),
                    rng.uniform((cfg.batch_size,), 0, cfg.num_classes, dtype=tf.int64),
                )
                for _ in range(cfg.synthetic_batches)
            ]

    def _decode_and_augment(self, path, label):
        """Random-resized-crop (area 8-100%, aspect 3/4-4/3) + flip, as torchvision's."""
        size = self.config.image_size
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        begin, crop, _ = tf.image.sample_distorted_bounding_box(
            tf.shape(image),
            bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
            area_range=(0.08, 1.0),
            aspect_ratio_range=(3 / 4, 4 / 3),
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        image = tf.slice(image, begin, crop)
        image = tf.image.resize(image, (size, size)) / 255.0
        image = tf.image.random_flip_left_right(image)
        image = (image - IMAGENET_MEAN) / IMAGENET_STD
        if self.config.data_format == "channels_first":
            image = tf.transpose(image, (2, 0, 1))
        return image, label

    def _real_dataset(self, shard: int, num_shards: int) -> tf.data.Dataset:
        cfg = self.config
        paths, labels, _ = image_folder(cfg.data_dir)
        keep = [i for i, path in enumerate(paths) if path not in self.skip_images]  # undecodable: set apart before
        paths, labels = [paths[i] for i in keep], [labels[i] for i in keep]
        dataset = tf.data.Dataset.from_tensor_slices((paths, np.asarray(labels, dtype=np.int64)))
        if num_shards > 1:  # each worker reads its own shard of the files (shard may be a tensor)
            dataset = dataset.shard(num_shards, shard)
        dataset = (
            dataset.shuffle(max(1, len(paths) // num_shards), seed=cfg.seed, reshuffle_each_iteration=True)
            .repeat()
            .map(self._decode_and_augment, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
        )
        if not self.strict_data:  # a file that passed the scan but still fails to decode: skipped (not countable here)
            dataset = dataset.ignore_errors()
        dataset = dataset.batch(cfg.batch_size, drop_remainder=True)
        options = tf.data.Options()
        options.threading.private_threadpool_size = max(cfg.num_data_workers, 1)
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return dataset.with_options(options)

    def real_batches(self):
        world = self.dist.world
        dataset = self._real_dataset(world.rank, world.size)
        if self.gpus:
            dataset = dataset.apply(tf.data.experimental.prefetch_to_device(self.device_name))
        else:
            dataset = dataset.prefetch(tf.data.AUTOTUNE)
        return iter(dataset)

    def train_step(self, batch):
        return self._step(*batch)

    def close(self) -> None:
        if getattr(self, "hvd", None) is not None:
            self.hvd.shutdown()  # finalizes MPI: mpirun fails a rank that exits without it

    trace_suffix = ".xplane.pb"  # the TensorFlow profiler's XSpace (TensorBoard's profile plugin reads it)

    def profile_steps(self, batches, num_steps: int, path) -> None:
        from ..measure.trace import annotation

        logdir = self.start_profiler(path)
        try:
            self.timed_loop(batches, num_steps,
                            annotate=lambda kind, index: tf.profiler.experimental.Trace(annotation(kind, index)))
        finally:
            self.stop_profiler(logdir, path)

    def start_profiler(self, path) -> str:
        """tf.profiler writes into a log directory of its own (made beside `path`); returns it."""
        logdir = tempfile.mkdtemp(prefix=".tf-profile-", dir=Path(path).parent)
        try:
            tf.profiler.experimental.start(logdir)
        except BaseException:
            shutil.rmtree(logdir, ignore_errors=True)
            raise
        return logdir

    def stop_profiler(self, logdir: str, path) -> None:
        """Stop it and move its one XSpace file to `path`; the log directory goes."""
        try:
            tf.profiler.experimental.stop()
            (written,) = Path(logdir).rglob("*.xplane.pb")
            shutil.move(str(written), str(path))
        finally:
            shutil.rmtree(logdir, ignore_errors=True)

    def synchronize(self) -> None:
        if self.gpus:  # CPU ops of a tf.function call complete before it returns
            tf.test.experimental.sync_devices()

    def loss_value(self, loss) -> float:
        return float(np.asarray(loss))

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, (tf.errors.ResourceExhaustedError, MemoryError)) or looks_like_oom(
            str(error)
        )

    def reset_peak_memory(self) -> None:
        if self.gpus:
            tf.config.experimental.reset_memory_stats("GPU:0")

    def peak_memory(self) -> AllocatorPeaks:
        if not self.gpus:
            return AllocatorPeaks()
        return AllocatorPeaks(allocated=tf.config.experimental.get_memory_info("GPU:0")["peak"])


class TensorFlowAllreduceFramework(TensorFlowFramework):
    """--strategy allreduce: MultiWorkerMirroredStrategy (ring on CPU, NCCL on GPU)."""

    def _make_strategy(self):
        return all_reduce_strategy(bool(self.gpus))

    def collective_library(self, gpu: bool) -> str | None:
        return "nccl" if gpu else "ring"  # as all_reduce_strategy asks for it

    def collective(self) -> tuple[str | None, str | None]:
        options = getattr(self.strategy.extended, "_communication_options", None)  # as set; private in TF
        implementation = getattr(getattr(options, "implementation", None), "name", None)
        return (self.collective_library(bool(self.gpus)),
                f"MultiWorkerMirroredStrategy ({implementation})" if implementation else "MultiWorkerMirroredStrategy")

    def _make_step(self):
        return tf.function(self._allreduce_step, jit_compile=False)

    def _lars_reference(self, gradients) -> list:
        """Each replica holds its own gradient; the optimizer applies their sum: all-reduce it for the norms
        (LARS under allreduce exchanges the gradients twice)."""
        context = tf.distribute.get_replica_context()
        return context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)

    def _allreduce_step(self, images, labels):
        per_replica = self.strategy.run(self._train_step, args=(images, labels))
        return self.strategy.experimental_local_results(per_replica)[0]


class TensorFlowHorovodFramework(TensorFlowFramework):
    """--strategy horovod."""

    def _init_distributed(self) -> None:
        import horovod.tensorflow as hvd

        hvd.init()
        self.hvd = hvd
        # Keras 3 variables wrap tf.Variables: Horovod needs the wrapped ones.
        hvd.broadcast_variables([v.value for v in self.model.variables], root_rank=0)
        hvd.broadcast_variables([v.value for v in self.optimizer.variables], root_rank=0)

    def collective_library(self, gpu: bool) -> str | None:
        import horovod.tensorflow as hvd

        from ..distributed.strategies.horovod import collective

        return collective(hvd, gpu, initialised=False)[0]

    def collective(self) -> tuple[str | None, str | None]:
        from ..distributed.strategies.horovod import collective

        return collective(self.hvd, bool(self.gpus))
