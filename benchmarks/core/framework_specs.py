"""What the host knows of each framework without importing it: one entry per framework, from which
the --framework choices and aliases, the installed check, the default layout, the framework-only
flags, the backend's registry line and benchrun's default image are all derived.

A new framework is one backend module (benchmarks/frameworks/) plus one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FrameworkSpec:
    name: str
    title: str  # as its users write it, in messages
    aliases: tuple[str, ...]
    modules: tuple[str, ...]  # found (not imported): the framework is installed
    data_format: str  # its native layout: the default --data-format
    cpu_data_formats: tuple[str, ...]  # the layouts its CPU convolutions support
    own_flags: tuple[str, ...]  # bench options only this framework takes
    step_timings: tuple[str, ...]  # the --step-timing choices its backend implements (step_timing.py)
    backend: str  # "module:Class" of its Framework backend
    image: str  # the Docker image `benchrun` runs it in unless --image says otherwise
    comm_backends: tuple[str, str]  # `bench comm`'s default backend on a CPU, and on a GPU (a strategy may name its own)
    cluster_ports: bool = False  # its ranks need every rank's ports before the framework starts (TF's cluster spec)


FRAMEWORKS = {spec.name: spec for spec in (
    FrameworkSpec("torch", "PyTorch", ("pytorch",), ("torch", "torchvision"), "channels_first",
                  ("channels_first", "channels_last"), ("compile",), ("sync", "events"),
                  "benchmarks.frameworks.torch_backend:TorchFramework", "dlbench-torch:latest", ("gloo", "nccl")),
    FrameworkSpec("tensorflow", "TensorFlow", ("tf",), ("tensorflow",), "channels_last", ("channels_last",), ("xla",), ("sync",),
                  "benchmarks.frameworks.tf_backend:TensorFlowFramework", "dlbench-tensorflow:latest",
                  ("collective", "collective"), cluster_ports=True),
)}
ALIASES = {alias: spec.name for spec in FRAMEWORKS.values() for alias in spec.aliases}
# `bench comm`'s backends: name -> (framework, "module:Class" of its CommBackend, in benchmarks/comm/)
COMM_BACKENDS = {
    "gloo": ("torch", "benchmarks.comm.torch_dist:TorchDistBackend"),
    "nccl": ("torch", "benchmarks.comm.torch_dist:TorchDistBackend"),
    "mpi": ("torch", "benchmarks.comm.torch_dist:TorchDistBackend"),
    "horovod": ("torch", "benchmarks.comm.horovod_comm:HorovodBackend"),
    "collective": ("tensorflow", "benchmarks.comm.tf_collective:TFCollectiveBackend"),
    "ps": ("tensorflow", "benchmarks.comm.tf_ps_comm:TFPsBackend"),
}


def spec_of(name: str) -> FrameworkSpec:
    """The spec of a framework named by its name or an alias (KeyError for neither)."""
    return FRAMEWORKS[ALIASES.get(name, name)]
