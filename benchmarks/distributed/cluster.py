"""Roles and TensorFlow cluster specs, derived from the world and the gathered peers.

Process 0 is always the reporter: worker 0, or the chief (coordinator) under
--strategy ps. Under ps, processes 1..N are workers and the last --num-ps are
parameter servers, so a cyclic launch (`srun -m cyclic`) co-locates PS with
workers as in seed 000.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from ..errors import UsageError
from .world import World


@dataclass(frozen=True)
class Role:
    kind: str  # "worker", "chief" or "ps"
    index: int  # index among processes of that kind

    def as_dict(self) -> dict:
        return {"kind": self.kind, "index": self.index}


def role_of(world: World, strategy: str, num_ps: int) -> Role:
    if strategy != "ps":
        return Role("worker", world.rank)
    num_workers = world.size - 1 - num_ps
    if num_workers < 1:
        raise UsageError(
            f"--strategy ps --num-ps {num_ps} needs at least {num_ps + 2} processes "
            f"(1 chief + {num_ps} PS + 1 worker), got {world.size}"
        )
    if world.rank == 0:
        return Role("chief", 0)
    if world.rank <= num_workers:
        return Role("worker", world.rank - 1)
    return Role("ps", world.rank - 1 - num_workers)


def my_address(world: World) -> str:
    """The address peers use for this process: loopback when the whole run is on one node."""
    if world.num_nodes == 1:
        return "127.0.0.1"
    return os.environ.get("DLBENCH_HOST") or socket.gethostname()


def assign_ports(peers: list[dict], worker_port: int, ps_port: int) -> list[str]:
    """host:port per process; processes of one kind on one host get consecutive ports."""
    seen: dict[tuple[str, str], int] = {}
    addresses = []
    for peer in peers:
        key = (peer["address"], peer["role"]["kind"])
        local = seen.get(key, 0)
        seen[key] = local + 1
        base = {"worker": worker_port, "ps": ps_port, "chief": ps_port + 10}[peer["role"]["kind"]]
        addresses.append(f"{peer['address']}:{base + local}")
    return addresses


def tf_config(peers: list[dict], me: int, worker_port: int, ps_port: int) -> dict:
    """TF_CONFIG for process `me`, from every process's {address, role}."""
    addresses = assign_ports(peers, worker_port, ps_port)
    cluster: dict[str, list[str]] = {}
    for peer, address in sorted(zip(peers, addresses), key=lambda pa: (pa[0]["role"]["kind"], pa[0]["role"]["index"])):
        cluster.setdefault(peer["role"]["kind"], []).append(address)
    role = peers[me]["role"]
    return {"cluster": cluster, "task": {"type": role["kind"], "index": role["index"]}}


class GreedyPlacer:
    """tf_cnn_benchmarks' greedy load balancing: each variable, in creation order, goes to the
    parameter server holding the fewest bytes so far (seed 000, section 2.1.1)."""

    def __init__(self, num_ps: int):
        self.loads = [0] * num_ps

    def place(self, size_bytes: int) -> int:
        target = min(range(len(self.loads)), key=lambda ps: (self.loads[ps], ps))
        self.loads[target] += size_bytes
        return target


def greedy_assign(sizes: list[int], num_ps: int) -> list[int]:
    placer = GreedyPlacer(num_ps)
    return [placer.place(size) for size in sizes]
