"""Horovod (PyTorch binding): gloo or MPI underneath, whichever horovodrun/mpirun chose."""

from __future__ import annotations

import numpy as np
import torch

from ..errors import UsageError
from ..frameworks.base import DeviceInfo
from .base import CommBackend
from .torch_dist import model_gradient_bytes


class HorovodBackend(CommBackend):
    framework = "torch"

    def setup(self) -> None:
        try:
            import horovod.torch as hvd
        except ImportError as error:
            raise UsageError(f"--backend horovod: Horovod is not importable here ({error}); "
                             "use a dlbench-horovod image") from None
        hvd.init()
        self.hvd = hvd
        gpus = torch.cuda.device_count()
        self.device = torch.device(f"cuda:{hvd.local_rank() % gpus}" if gpus and self.options.device != "cpu" else "cpu")

    def version(self) -> str:
        return f"torch {torch.__version__}, horovod {self.hvd.__version__}"

    def device_info(self) -> DeviceInfo:
        from ..provenance import cpu_model

        gpu = self.device.type == "cuda"
        return DeviceInfo(kind="gpu" if gpu else "cpu",
                          name=torch.cuda.get_device_name(self.device) if gpu else cpu_model(), count=1,
                          cuda_version=torch.version.cuda, visible_gpus=torch.cuda.device_count())

    def buffer(self, values):
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(self.device)

    def read(self, buffer):
        return buffer.cpu().numpy()

    def allreduce(self, buffer):
        return self.hvd.allreduce_(buffer, op=self.hvd.Sum)

    def allreduce_many(self, buffers: list) -> list:
        """Asynchronous submission lets Horovod fuse the buckets, as its optimizer does."""
        handles = [self.hvd.allreduce_async_(b, op=self.hvd.Sum) for b in buffers]
        return [self.hvd.synchronize(h) for h in handles]

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        self.hvd.barrier()

    def gradient_buckets(self, model: str) -> tuple[list[int], str]:
        return (model_gradient_bytes(model),
                "every gradient submitted asynchronously in backward order, as hvd.DistributedOptimizer does; "
                "Horovod fuses them (HOROVOD_FUSION_THRESHOLD, 128 MiB by default)")

    def close(self) -> None:
        self.hvd.shutdown()
