"""`horovod`: Horovod's ring all-reduce, for both frameworks."""

from __future__ import annotations

from .base import Strategy


class HorovodStrategy(Strategy):
    name = "horovod"
    summary = "Horovod ring all-reduce"
    frameworks = ("torch", "tensorflow")
    backends = {"torch": "benchmarks.frameworks.torch_backend:TorchHorovodFramework",
                "tensorflow": "benchmarks.frameworks.tf_backend:TensorFlowHorovodFramework"}
