"""`horovod`: Horovod's ring all-reduce, for both frameworks."""

from __future__ import annotations

from .base import Strategy


class HorovodStrategy(Strategy):
    name = "horovod"
    summary = "Horovod ring all-reduce"
    frameworks = ("torch", "tensorflow")
    backends = {"torch": "benchmarks.frameworks.torch_backend:TorchHorovodFramework",
                "tensorflow": "benchmarks.frameworks.tf_backend:TensorFlowHorovodFramework"}


def collective(hvd, gpu: bool, initialised: bool = True) -> tuple[str, str]:
    """(library, backend) of Horovod's exchange, from its module `hvd` (horovod.torch or horovod.tensorflow):
    NCCL for GPU tensors when built with it, else its controller's MPI or gloo; before hvd.init() the
    controller is the one built (MPI first, as Horovod prefers it)."""
    if initialised:
        controller = "mpi" if hvd.mpi_enabled() else "gloo"
    else:
        controller = "mpi" if hvd.mpi_built() else "gloo"
    library = "nccl" if gpu and hvd.nccl_built() else controller
    return library, f"horovod ({controller} controller)"
