"""Horovod (PyTorch binding): gloo or MPI underneath, whichever horovodrun/mpirun chose."""

from __future__ import annotations

import torch

from ..core.errors import UsageError
from .torch_dist import TorchBackend, model_gradient_bytes


class HorovodBackend(TorchBackend):
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

    def allreduce(self, buffer):
        return self.hvd.allreduce_(buffer, op=self.hvd.Sum)

    def allreduce_many(self, buffers: list) -> list:
        """Asynchronous submission lets Horovod fuse the buckets, as its optimizer does."""
        handles = [self.hvd.allreduce_async_(b, op=self.hvd.Sum) for b in buffers]
        return [self.hvd.synchronize(h) for h in handles]

    def barrier(self) -> None:
        self.hvd.barrier()

    def gradient_buckets(self, model: str) -> tuple[list[int], str]:
        return (model_gradient_bytes(model, self.options.image_size),
                "every gradient submitted asynchronously in backward order, as hvd.DistributedOptimizer does; "
                "Horovod fuses them (HOROVOD_FUSION_THRESHOLD, 128 MiB by default)")

    def close(self) -> None:
        self.hvd.shutdown()
