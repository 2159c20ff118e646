"""The one interface every framework backend implements.

A backend knows how to build a model, feed it and take a training step on its
framework; everything about *measuring* (timing, synchronisation points,
statistics, memory probes, the record) lives in shared code that calls these
methods, so no backend can measure differently from another.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterator

from ..config import BenchConfig


@dataclass
class DeviceInfo:
    kind: str  # "cpu" or "gpu"
    name: str
    count: int  # devices this process trains on
    cuda_version: str | None = None
    cudnn_version: str | None = None
    visible_gpus: int = 0


@dataclass
class AllocatorPeaks:
    allocated: int | None = None
    reserved: int | None = None


class Framework(ABC):
    name: str

    def __init__(self, config: BenchConfig):
        self.config = config

    @abstractmethod
    def version(self) -> str: ...

    @abstractmethod
    def setup(self) -> None:
        """Threads, seed, device, model, optimizer and the compiled train step."""

    @abstractmethod
    def device_info(self) -> DeviceInfo: ...

    @abstractmethod
    def synthetic_batches(self) -> list:
        """`config.synthetic_batches` distinct (images, labels) batches already on the device."""

    @abstractmethod
    def real_batches(self) -> Iterator:
        """Endless iterator of device batches decoded and augmented by the framework's own pipeline."""

    @abstractmethod
    def train_step(self, batch) -> object:
        """One forward + backward + optimizer step; returns the loss without forcing a sync."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block until all queued device work is done."""

    @abstractmethod
    def loss_value(self, loss) -> float: ...

    @abstractmethod
    def is_out_of_memory(self, error: BaseException) -> bool: ...

    def reset_peak_memory(self) -> None:
        """Reset the framework allocator's peak counters (GPU only)."""

    def peak_memory(self) -> AllocatorPeaks:
        return AllocatorPeaks()

    def close(self) -> None:
        """Release pipelines and worker processes."""


OOM_MESSAGES = (
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "std::bad_alloc",
    "oom when allocating",
    "resource exhausted",
    "resourceexhausted",
    "failed to allocate",
)


def looks_like_oom(text: str) -> bool:
    """Message test shared by every backend and by the supervisor's post-mortem."""
    lowered = text.lower()
    return any(marker in lowered for marker in OOM_MESSAGES)
