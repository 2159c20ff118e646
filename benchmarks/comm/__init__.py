"""Communication microbenchmarks (`bench comm`): all-reduce, ping-pong, gradient buckets, PS push/pull.

Adding a backend = one module with a `CommBackend` subclass + one line here.
"""

from __future__ import annotations

from ..registry import load_target

# name -> (framework, "module:Class")
BACKENDS = {
    "gloo": ("torch", "benchmarks.comm.torch_dist:TorchDistBackend"),
    "nccl": ("torch", "benchmarks.comm.torch_dist:TorchDistBackend"),
    "mpi": ("torch", "benchmarks.comm.torch_dist:TorchDistBackend"),
    "horovod": ("torch", "benchmarks.comm.horovod_comm:HorovodBackend"),
    "collective": ("tensorflow", "benchmarks.comm.tf_collective:TFCollectiveBackend"),
    "ps": ("tensorflow", "benchmarks.comm.tf_ps_comm:TFPsBackend"),
}


def load(name: str):
    return load_target(BACKENDS[name][1])
