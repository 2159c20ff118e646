"""--strategy fsdp: PyTorch's fully sharded data parallel (FSDP2, `fully_shard`).

Each rank keeps 1/N of every parameter, gradient and momentum buffer. A unit's parameters are
all-gathered just before it runs (in forward, and again in backward) and its gradients are
reduce-scattered, so a rank's memory for the model falls with N for about 1.5x DDP's traffic.
"""

from __future__ import annotations

import torch
from torch.distributed.fsdp import fully_shard

from .base import checksum
from .torch_backend import TorchDdpFramework


def shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules sharded one by one (one all-gather each): the model's children, and the members of
    each Sequential among them (ResNet's blocks, AlexNet's layers), when they hold parameters."""
    units = []
    for child in model.children():
        members = list(child.children()) if isinstance(child, torch.nn.Sequential) else [child]
        units.extend(member for member in members if any(True for _ in member.parameters()))
    return units


class TorchFsdpFramework(TorchDdpFramework):
    def _init_distributed(self) -> None:
        self.join_process_group()
        for unit in shard_units(self.replica):
            fully_shard(unit)
        fully_shard(self.replica)  # what no unit holds (e.g. a lone bias), and the root's prefetching
        self.optimizer = self.new_optimizer()  # over the shards: the parameters it held were replaced

    def parameter_checksum(self) -> str:
        """Of the whole parameters, gathered from every rank's shard (a collective: every rank asks)."""
        return checksum(p.full_tensor().detach().float().cpu().numpy() for p in self.replica.parameters())
