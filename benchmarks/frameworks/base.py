"""The one interface every framework backend implements (what it may add: frameworks/capabilities.py).

A backend knows how to build a model, feed it and take a training step on its
framework; everything about *measuring* (timing, synchronisation points,
statistics, memory probes, the record) lives in shared code that calls these
methods, so no backend can measure differently from another.
"""

from __future__ import annotations

import hashlib
import itertools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterator

from ..distributed import strategies
from ..distributed.world import SINGLE, Distributed
from ..measure import timing
from ..settings.config import BenchConfig

INCEPTION_AUX_MIN_SIZE = 299  # the aux head's 5x5 pooling needs a 17x17 Mixed_6e map
AUX_LOSS_WEIGHT = 0.4  # as in torchvision's reference training script


def has_aux_head(model: str, image_size: int) -> bool:
    """InceptionV3 trains its auxiliary classifier, in every framework, where its input is large enough."""
    return model == "inception3" and image_size >= INCEPTION_AUX_MIN_SIZE


@dataclass
class DeviceInfo:
    kind: str  # "cpu" or "gpu"
    name: str
    count: int  # devices this process trains on
    cuda_version: str | None = None
    cudnn_version: str | None = None
    visible_gpus: int = 0
    ordinals: tuple[int, ...] = ()  # CUDA ordinals of the GPUs it trains on: what NVML must sample
    intra_op_threads: int | None = None  # as the framework runs them; None: it picks at run time


def framework_section(name: str, version: str, device: DeviceInfo) -> dict:
    """The record's provenance.framework, for training and `bench comm` alike."""
    return {"name": name, "version": version, "device_kind": device.kind, "device_name": device.name,
            "device_count": device.count, "visible_gpus": device.visible_gpus, "cuda_version": device.cuda_version,
            "cudnn_version": device.cudnn_version, "intra_op_threads": device.intra_op_threads}


def checksum(arrays) -> str:
    """Framework.parameter_checksum from the parameters as float32 numpy arrays."""
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]


@dataclass
class AllocatorPeaks:
    allocated: int | None = None
    reserved: int | None = None


class Framework(ABC):
    name: str
    precision_state: dict | None = None  # the record's `precision` section, set in setup (precision.in_effect)
    compile_state: dict | None = None  # the record's `compile` section, set by compile_step (compilation.section)
    step_timing_state: dict | None = None  # the record's `step_timing` section, set in setup (step_timing.section)
    new_step_event = None  # --step-timing events: a factory of device events timing each step; None: the host clock

    def __init__(self, config: BenchConfig, dist: Distributed = SINGLE, *, keep_losses: bool = False,
                 skip_images: frozenset = frozenset(), strict_data: bool = False):
        """`keep_losses`: keep every timed step's loss (--tensorboard); `skip_images`: --data-dir files found
        undecodable before the run (dataset.scan_images); `strict_data`: one that fails to decode stops the run."""
        self.config = config
        self.dist = dist
        self.keep_losses, self.skip_images, self.strict_data = keep_losses, frozenset(skip_images), strict_data
        self.decode_failures: list[tuple[str, str]] = []  # (path, why) of images skipped while decoding

    def gpu_ordinal(self, visible: int) -> int:
        """The CUDA ordinal this process trains on, among `visible` GPUs: ranks on a node take turns."""
        return self.dist.world.local_rank % visible

    def record_sections(self) -> dict:
        """Record sections known once the backend is set up (precision, compile, flops): null before."""
        return {"precision": self.precision_state, "compile": self.compile_state, "step_timing": self.step_timing_state}

    @property
    def serves_only(self) -> bool:
        """True for processes that only host state for others (TF PS and PS-mode workers)."""
        return strategies.get(self.config.strategy).serves_only(self.dist.role)

    def batches(self) -> Iterator:
        if self.config.data_dir:
            return self.real_batches()
        return itertools.cycle(self.synthetic_batches())

    def timed_loop(self, batches: Iterator, num_steps: int, **options) -> timing.TimedLoop:
        """The measured loop; strategies whose steps run elsewhere (TF PS) override it. `options`:
        timing.run_steps' display_every and display (progress lines), annotate, and new_event (by
        default this run's --step-timing)."""
        options.setdefault("new_event", self.new_step_event)
        return timing.run_steps(batches, self.train_step, self.synchronize, num_steps, self.config.batch_size,
                                keep_losses=self.keep_losses, **options)

    trace_suffix = ".trace.json"  # the profiler trace's file name ending (bench --trace: capabilities.ProfilesSteps)

    # -- the path (benchmarks/results/fingerprint.py) and the preflight (benchmarks/measure/preflight.py) ----------

    def compute_threads(self) -> int | None:
        """The intra-op threads this backend will compute with, known before setup: --num-threads, else the
        framework's default where it has one (None: it picks at run time)."""
        return self.config.num_threads

    def visible_gpus(self) -> int | None:
        """GPUs the framework sees, before setup (None: not known)."""
        return None

    def collective_library(self, gpu: bool) -> str | None:
        """The library that will carry this backend's gradient exchange, on a GPU or not (CollectivePath's
        library), known before setup: NCCL's log must be asked for before NCCL starts. None: no exchange."""
        return None

    def collective(self) -> tuple[str | None, str | None]:
        """(library, backend as the framework names it) of the exchange as set up; by default the library
        foreseen for the device trained on, the framework naming none."""
        return self.collective_library(self.device_info().kind == "gpu"), None

    def shared_memory_for_data(self) -> int:
        """Bytes of /dev/shm the input pipeline holds at once (worker processes handing batches over in
        shared memory); 0 for pipelines of threads."""
        return 0

    @abstractmethod
    def parameter_checksum(self) -> str:
        """Digest of all trainable parameters, to check replicas ended identical."""

    def placement(self) -> list | None:
        """Per-PS variable count and bytes, under --strategy ps."""
        return None

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

    def model_info(self) -> dict | None:
        """The record's `model` once set up: {"parameters": trainable count, "aux_head": bool}; None: not stated."""
        return None

    # -- time to accuracy (benchmarks/run/accuracy.py) ------------------------------------------------

    staleness: list | None = None  # per update, updates applied meanwhile by others (asynchronous strategies)

    def labelled_loop(self, batches: Iterator, num_updates: int, before_update) -> timing.TimedLoop:
        """`num_updates` training steps on labelled batches, `before_update()` before each (the LR
        schedule), timed as every loop is; every step's loss kept. Strategies whose steps run
        elsewhere (TF PS) override it."""
        def step(batch):
            before_update()
            return self.train_step(batch)

        return timing.run_steps(batches, step, self.synchronize, num_updates, self.config.batch_size, keep_losses=True,
                                new_event=self.new_step_event)

    @property
    def uses_lars(self) -> bool:
        return self.config.lr_rule == "lars"

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
    # cuBLAS / cuDNN / cuSOLVER could not allocate a handle or workspace: a GPU near capacity
    "status_alloc_failed",
    # a tensor past what the kernels can index (torch's 32-bit index checks): the batch does not fit either
    "canuse32bitindexmath",
    "fit into 32-bit index math",
    "int_max elements",
)


def looks_like_oom(text: str) -> bool:
    """Message test shared by every backend and by the supervisor's post-mortem: also the
    library errors a GPU raises near capacity instead of an out-of-memory error, so that
    --find-max-batch bisects below such a batch rather than stopping."""
    lowered = text.lower()
    return any(marker in lowered for marker in OOM_MESSAGES)
