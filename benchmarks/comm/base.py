"""The one interface every communication backend implements.

A backend moves float32 buffers between ranks with its framework's own
collectives; what is timed, how often, how results are checked and combined
lives once in benchmarks.comm.measure, so no backend measures differently.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from ..frameworks.base import DeviceInfo, Distributed


@dataclass(frozen=True)
class CommOptions:
    framework: str
    backend: str
    ops: tuple[str, ...]
    min_bytes: int = 4
    max_bytes: int = 256 * 1024 * 1024
    step_factor: int = 2
    warmup_iters: int = 5
    iters: int = 20
    model: str = "resnet50"
    image_size: int | None = None  # the model's input size (TensorFlow's dense layers depend on it); None: its default
    device: str = "auto"
    strategy: str = "none"
    num_ps: int = 0
    ps_placement: str = "round-robin"
    worker_port: int = 2220
    ps_port: int = 2230
    rendezvous_port: int = 2210
    rendezvous_timeout: float = 300.0
    timeout: float | None = None

    def as_dict(self) -> dict:
        from dataclasses import asdict

        return {**asdict(self), "ops": list(self.ops), "dtype": "float32"}


class CommBackend(ABC):
    name: str  # as given to --backend
    framework: str
    point_to_point = False  # send/recv available (ping-pong)

    def __init__(self, options: CommOptions, dist: Distributed):
        self.options = options
        self.dist = dist

    @abstractmethod
    def setup(self) -> None:
        """Device, process group / strategy / Horovod init."""

    @abstractmethod
    def version(self) -> str: ...

    @abstractmethod
    def device_info(self) -> DeviceInfo: ...

    @abstractmethod
    def buffer(self, values) -> object:
        """A device buffer holding `values` (a float32 numpy array)."""

    @abstractmethod
    def read(self, buffer):
        """The buffer's contents as a numpy array (untimed)."""

    @abstractmethod
    def allreduce(self, buffer) -> object:
        """Sum over ranks; returns the reduced buffer (in place where the framework allows)."""

    def allreduce_many(self, buffers: list) -> list:
        """Several buffers back to back, as a training step's gradient buckets."""
        return [self.allreduce(b) for b in buffers]

    @abstractmethod
    def synchronize(self) -> None:
        """Block until queued device work is done (the timed region ends after it)."""

    def barrier(self) -> None:
        """Line the ranks up before a timed loop; outside every timed region."""
        self.allreduce(self.buffer(_one()))
        self.synchronize()

    def send(self, buffer, peer: int) -> None:
        raise NotImplementedError

    def recv(self, buffer, peer: int) -> object:
        raise NotImplementedError

    @abstractmethod
    def gradient_buckets(self, model: str) -> tuple[list[int], str]:
        """The byte sizes one training step of `model` all-reduces, in order, and the rule used."""

    def close(self) -> None:
        """Tear down process groups (MPI_Finalize under Horovod)."""


def _one():
    import numpy as np

    return np.zeros(1, dtype=np.float32)
