"""`allreduce`: TensorFlow MultiWorkerMirroredStrategy (ring on CPU, NCCL on GPU)."""

from __future__ import annotations

from .base import Strategy


class AllreduceStrategy(Strategy):
    name = "allreduce"
    summary = "TF MultiWorkerMirroredStrategy"
    frameworks = ("tensorflow",)
    tf_cluster = True
    backends = {"tensorflow": "benchmarks.frameworks.tf_backend:TensorFlowAllreduceFramework"}
