"""TensorFlow collective ops through MultiWorkerMirroredStrategy (RING on CPU, NCCL on GPU),
the path --strategy allreduce trains with. TF_CONFIG is set by the caller before import."""

from __future__ import annotations

from ..frameworks.tf_backend import all_reduce_strategy  # first: it quiets TensorFlow's C++ logging before the import

# isort: split

import numpy as np
import tensorflow as tf

from ..core.errors import UsageError
from ..frameworks.base import DeviceInfo
from .base import CommBackend


def model_gradient_bytes(model: str, image_size: int) -> list[int]:
    """Bytes of each trainable variable of the Keras model built for `image_size`, in backward (reverse) order."""
    from ..frameworks import keras_models

    network = keras_models.build(model, (image_size, image_size, 3), 1000, model == "inception3")
    return [int(np.prod(v.shape)) * 4 for v in reversed(network.trainable_variables)]


class TFCollectiveBackend(CommBackend):
    framework = "tensorflow"

    def setup(self) -> None:
        gpus = tf.config.list_physical_devices("GPU")
        if self.options.device == "gpu" and not gpus:
            raise UsageError("--device gpu but TensorFlow sees no GPU (choices here: auto, cpu)")
        if self.options.device == "cpu" and gpus:
            tf.config.set_visible_devices([], "GPU")
            gpus = []
        if gpus:
            gpus = [gpus[self.dist.world.local_rank % len(gpus)]]
            tf.config.set_visible_devices(gpus, "GPU")
        self.gpus = gpus
        self.strategy = all_reduce_strategy(bool(gpus))
        self.device = self.strategy.extended.worker_devices[0]  # this worker's device in the cluster
        strategy = self.strategy

        def reduce(values):
            def replica(v):
                # an op made in the replica's device scope: a bare function input has no device,
                # and the all-reduce takes its destination from the value's device
                v = tf.nest.map_structure(tf.identity, v)
                return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, v)

            return strategy.experimental_local_results(strategy.run(replica, args=(values,)))[0]

        self._reduce = tf.function(reduce)

    def version(self) -> str:
        return tf.__version__

    def device_info(self) -> DeviceInfo:
        from ..results.provenance import cpu_model

        name = tf.config.experimental.get_device_details(self.gpus[0]).get("device_name", "GPU") if self.gpus else cpu_model()
        build = tf.sysconfig.get_build_info()
        return DeviceInfo(kind="gpu" if self.gpus else "cpu", name=name, count=1,
                          cuda_version=build.get("cuda_version"), cudnn_version=build.get("cudnn_version"),
                          visible_gpus=len(self.gpus))

    def buffer(self, values):
        with tf.device(self.device):
            return tf.identity(tf.constant(np.asarray(values, dtype=np.float32)))

    def read(self, buffer):
        return buffer.numpy()

    def allreduce(self, buffer):
        return self._reduce(buffer)

    def allreduce_many(self, buffers: list) -> list:
        """One all_reduce of the list: TF packs it as MultiWorkerMirroredStrategy packs gradients."""
        return list(self._reduce(list(buffers)))

    def synchronize(self) -> None:
        if self.gpus:  # CPU ops of a tf.function call complete before it returns
            tf.test.experimental.sync_devices()

    def gradient_buckets(self, model: str) -> tuple[list[int], str]:
        return (model_gradient_bytes(model, self.options.image_size),
                "every gradient in one all_reduce call, packed by MultiWorkerMirroredStrategy "
                "(CommunicationOptions bytes_per_pack=0: TF's automatic packing)")
