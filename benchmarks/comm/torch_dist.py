"""torch.distributed: gloo (CPU), NCCL (GPU), MPI (when torch was built with it)."""

from __future__ import annotations

import datetime

import numpy as np
import torch
import torch.distributed as dist

from ..core.errors import UsageError
from ..distributed.cluster import torch_init_method
from ..frameworks.base import DeviceInfo
from . import metrics
from .base import CommBackend


def device_for(backend: str, local_rank: int, gpus: int) -> str:
    """NCCL moves CUDA buffers, one GPU per local rank; gloo and MPI here move host buffers."""
    if backend == "nccl":
        if gpus < 1:
            raise UsageError("--backend nccl needs a CUDA device; torch sees none (choices here: gloo)")
        return f"cuda:{local_rank % gpus}"
    return "cpu"


def available(backend: str) -> bool:
    return {"gloo": dist.is_gloo_available, "nccl": dist.is_nccl_available, "mpi": dist.is_mpi_available}[backend]()


def model_gradient_bytes(model: str, image_size: int) -> list[int]:
    """Bytes of each trainable parameter's gradient, in the order backward produces them
    (reverse of definition, the order DDP assumes), of the model built for `image_size` (it matters
    for smallcnn, whose classifier follows the image size)."""
    from ..frameworks.torch_backend import build_model

    network = build_model(model, 1000, model == "inception3", image_size)
    return [p.numel() * p.element_size() for p in reversed(list(network.parameters())) if p.requires_grad]


class TorchBackend(CommBackend):
    """Float32 buffers on this rank's torch device (`self.device`, chosen in setup)."""

    framework = "torch"

    def device_info(self) -> DeviceInfo:
        from ..results.provenance import cpu_model

        gpu = self.device.type == "cuda"
        return DeviceInfo(kind="gpu" if gpu else "cpu",
                          name=torch.cuda.get_device_name(self.device) if gpu else cpu_model(), count=1,
                          cuda_version=torch.version.cuda,
                          visible_gpus=torch.cuda.device_count() if torch.cuda.is_available() else 0)

    def buffer(self, values):
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(self.device)

    def read(self, buffer):
        return buffer.cpu().numpy()

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


class TorchDistBackend(TorchBackend):
    point_to_point = True

    def setup(self) -> None:
        name, world = self.options.backend, self.dist.world
        if not available(name):
            built = [b for b in ("gloo", "nccl", "mpi") if available(b)]
            raise UsageError(f"this torch has no {name} backend (available: {', '.join(built)})")
        self.device = torch.device(device_for(name, world.local_rank, torch.cuda.device_count()))
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if name == "mpi":  # rank and size come from MPI itself
            dist.init_process_group("mpi")
            return
        init_method = torch_init_method(self.dist.coordinator, self.options.rendezvous_port)
        dist.init_process_group(name, init_method=init_method, rank=world.rank, world_size=world.size,
                                timeout=datetime.timedelta(seconds=self.options.rendezvous_timeout))

    def version(self) -> str:
        return torch.__version__

    def allreduce(self, buffer):
        dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
        return buffer

    def barrier(self) -> None:
        dist.barrier()
        self.synchronize()

    def send(self, buffer, peer: int) -> None:
        dist.send(buffer, peer)

    def recv(self, buffer, peer: int):
        dist.recv(buffer, peer)
        return buffer

    def gradient_buckets(self, model: str) -> tuple[list[int], str]:
        sizes = model_gradient_bytes(model, self.options.image_size)
        return (metrics.buckets_by_size(sizes, metrics.DDP_FIRST_BUCKET_BYTES, metrics.DDP_BUCKET_BYTES),
                "DDP buckets: gradients in backward order, first bucket closed at 1 MiB, the others at 25 MiB")

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
