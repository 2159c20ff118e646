"""`ddp`: PyTorch DistributedDataParallel (NCCL on GPU, gloo on CPU), one replica per rank."""

from __future__ import annotations

from .base import Strategy


class DdpStrategy(Strategy):
    name = "ddp"
    summary = "PyTorch DDP (gloo on CPU, NCCL on GPU)"
    frameworks = ("torch",)
    backends = {"torch": "benchmarks.frameworks.torch_backend:TorchDdpFramework"}
