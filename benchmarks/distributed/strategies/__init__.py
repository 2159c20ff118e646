"""One object per --strategy: PsStrategy in ps.py, the others (attributes only) here; adding one = a
Strategy subclass + its entry in _ALL."""

from __future__ import annotations

from .base import WORKER, Role, Strategy
from .ps import CHIEF, PS, PsStrategy


class NoStrategy(Strategy):
    name = "none"
    summary = "independent processes, each training its own replica"
    frameworks = ("torch", "tensorflow")
    syncs_replicas = False  # several ranks train independent replicas
    comm_ops = ("allreduce", "pingpong", "gradients")


class DdpStrategy(Strategy):
    name = "ddp"
    summary = "PyTorch DDP (gloo on CPU, NCCL on GPU)"
    frameworks = ("torch",)
    backends = {"torch": "benchmarks.frameworks.torch_backend:TorchDdpFramework"}


class HorovodStrategy(Strategy):
    name = "horovod"
    summary = "Horovod ring all-reduce"
    frameworks = ("torch", "tensorflow")
    backends = {"torch": "benchmarks.frameworks.torch_backend:TorchHorovodFramework",
                "tensorflow": "benchmarks.frameworks.tf_backend:TensorFlowHorovodFramework"}


class AllreduceStrategy(Strategy):
    name = "allreduce"
    summary = "TF MultiWorkerMirroredStrategy"
    frameworks = ("tensorflow",)
    tf_cluster = True
    backends = {"tensorflow": "benchmarks.frameworks.tf_backend:TensorFlowAllreduceFramework"}


class FsdpStrategy(Strategy):
    """Each rank holds 1/N of the parameters, gradients and optimizer state (benchmarks/frameworks/torch_fsdp.py)."""

    name = "fsdp"
    summary = "PyTorch fully sharded data parallel (FSDP2; gloo on CPU, NCCL on GPU)"
    frameworks = ("torch",)
    exchange = "all-gather + reduce-scatter"
    exchange_op = None  # no bench comm op moves a sharded step's traffic: reports predict none
    backends = {"torch": "benchmarks.frameworks.torch_fsdp:TorchFsdpFramework"}


_ALL = (NoStrategy(), DdpStrategy(), HorovodStrategy(), AllreduceStrategy(), PsStrategy(), FsdpStrategy())
STRATEGIES: dict[str, Strategy] = {strategy.name: strategy for strategy in _ALL}
NAMES = tuple(STRATEGIES)  # bench's --strategy choices, in this order
COMM_NAMES = tuple(name for name, s in STRATEGIES.items() if s.comm_ops)  # bench comm's
COMM_OPS = tuple(op for s in _ALL for op in s.comm_ops)  # every operation bench comm measures
DEFAULT = NoStrategy.name
ROLES = (WORKER, CHIEF, PS)  # every role kind a process can have


def get(name: str | None) -> Strategy:
    """The strategy called `name` (None: the default). Unknown names raise KeyError:
    callers validate first (config.validate_strategy says which names exist)."""
    return STRATEGIES[name or DEFAULT]


__all__ = ["COMM_NAMES", "COMM_OPS", "DEFAULT", "NAMES", "ROLES", "STRATEGIES", "Role", "Strategy", "get"]
