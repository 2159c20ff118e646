"""`fsdp`: PyTorch fully sharded data parallel (FSDP2): each rank holds 1/N of the parameters, gradients
and optimizer state (benchmarks/frameworks/torch_fsdp.py)."""

from __future__ import annotations

from .base import Strategy


class FsdpStrategy(Strategy):
    name = "fsdp"
    summary = "PyTorch fully sharded data parallel (FSDP2; gloo on CPU, NCCL on GPU)"
    frameworks = ("torch",)
    exchange = "all-gather + reduce-scatter"
    exchange_op = None  # no bench comm op moves a sharded step's traffic: reports predict none
    backends = {"torch": "benchmarks.frameworks.torch_fsdp:TorchFsdpFramework"}
