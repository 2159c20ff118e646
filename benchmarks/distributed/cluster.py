"""Roles and TensorFlow cluster specs, derived from the world and the gathered peers.

Process 0 is always the reporter: worker 0, or the chief under a strategy that
has one (strategies/ps.py says which process has which role).
"""

from __future__ import annotations

import hashlib
import os
import socket
from typing import Mapping

from .strategies import CHIEF, PS, WORKER
from .world import World

# A run's ports, as seed 000 numbers them: the rendezvous (torch's process group on the next port), TF workers
# from +10, parameter servers from +20, the chief at PS + 10. A port not given follows --rendezvous-port, and
# that one, not given, is placed by the run's token (distributed.cluster.run_ports); without a token, these.
SEED_000_PORTS = {"rendezvous_port": 2210, "worker_port": 2220, "ps_port": 2230}
# Where a token places the rendezvous port: below Linux's ephemeral ports (32768-60999) and above the local
# Slurm and MLflow servers of the tests.
TOKEN_PORTS = range(20000, 32768 - 64)


def my_address(world: World) -> str:
    """The address peers use for this process: loopback when the whole run is on one node."""
    if world.num_nodes == 1:
        return "127.0.0.1"
    return os.environ.get("DLBENCH_HOST") or socket.gethostname()


def run_ports(given: Mapping[str, int | None], token: str | None) -> dict[str, int]:
    """The run's three port options: each as given, else at its seed 000 distance from --rendezvous-port,
    which, not given, is the one of TOKEN_PORTS that a hash of the run's token picks (seed 000's without a
    token). Every rank has the same token, so all agree; two concurrent runs, each with its own token, share
    a port only by a small chance (docs/results.md), and then one fails in one line (rendezvous.py)."""
    rendezvous = given.get("rendezvous_port")
    if rendezvous is None:
        rendezvous = SEED_000_PORTS["rendezvous_port"]
        if token is not None:
            digest = int.from_bytes(hashlib.sha256(token.encode()).digest()[:8], "big")
            rendezvous = TOKEN_PORTS[digest % len(TOKEN_PORTS)]
    shift = rendezvous - SEED_000_PORTS["rendezvous_port"]
    return {name: port + shift if given.get(name) is None else given[name] for name, port in SEED_000_PORTS.items()}


def torch_init_method(coordinator: str, rendezvous_port: int) -> str:
    """torch.distributed's store: torchrun's when it set MASTER_ADDR/PORT, else one that process 0
    hosts next to dlbench's rendezvous."""
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        return "env://"
    return f"tcp://{coordinator}:{rendezvous_port + 1}"


def assign_ports(peers: list[dict], worker_port: int, ps_port: int) -> list[str]:
    """host:port per process; processes of one kind on one host get consecutive ports."""
    seen: dict[tuple[str, str], int] = {}
    addresses = []
    for peer in peers:
        key = (peer["address"], peer["role"]["kind"])
        local = seen.get(key, 0)
        seen[key] = local + 1
        base = {WORKER: worker_port, PS: ps_port, CHIEF: ps_port + 10}[peer["role"]["kind"]]
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
