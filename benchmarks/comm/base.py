"""The one interface every communication backend implements.

A backend moves float32 buffers between ranks with its framework's own
collectives; what is timed, how often, how results are checked and combined
lives once in benchmarks.comm.measure, so no backend measures differently.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass

from ..distributed.world import Distributed
from ..frameworks.base import DeviceInfo, looks_like_oom


@dataclass(frozen=True)
class CommOptions:
    """`bench comm`'s run, as comm.cli.options_from resolves it (defaults: options.OPTIONS)."""

    framework: str
    backend: str
    ops: tuple[str, ...]
    min_bytes: int
    max_bytes: int
    step_factor: int
    warmup_iters: int
    iters: int
    model: str
    image_size: int  # the model's input size (TensorFlow's dense layers depend on it)
    device: str
    strategy: str
    num_ps: int
    ps_placement: str
    worker_port: int
    ps_port: int
    rendezvous_port: int
    rendezvous_timeout: float
    timeout: float | None

    def as_dict(self) -> dict:
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
        import numpy as np

        self.allreduce(self.buffer(np.zeros(1, dtype=np.float32)))
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

    def is_out_of_memory(self, error: BaseException) -> bool:
        return looks_like_oom(str(error))
