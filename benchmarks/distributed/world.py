"""Rank, world size and peers, read from whatever launched this process.

One process is one rank. Launchers announce ranks in their own variables;
this module maps all of them to one `World`. Order matters: a Slurm job step
that runs `mpirun` or `torchrun` inside it carries Slurm variables too, so the
innermost launcher (the one that started this very process) is checked first.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import asdict, dataclass
from typing import Mapping


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    node_rank: int = 0
    num_nodes: int = 1
    launcher: str = "none"
    coordinator: str | None = None  # host of process 0: rendezvous and TF chief/worker 0

    @property
    def is_reporter(self) -> bool:
        return self.rank == 0

    def as_dict(self) -> dict:
        return asdict(self)


def _int(env: Mapping[str, str], *names: str, default: int | None = None) -> int | None:
    for name in names:
        if env.get(name, "").strip().lstrip("-").isdigit():
            return int(env[name])
    return default


def expand_nodelist(nodelist: str) -> list[str]:
    """Slurm's compressed host list ('node[1-3,7],gpu01') as names, without calling scontrol."""
    hosts, depth, part = [], 0, ""
    for char in nodelist + ",":
        if char == "," and depth == 0:
            if part:
                hosts.extend(_expand_one(part))
            part = ""
            continue
        depth += char == "["
        depth -= char == "]"
        part += char
    return hosts


def _expand_one(pattern: str) -> list[str]:
    match = re.fullmatch(r"([^\[]*)\[([^\]]+)\](.*)", pattern)
    if not match:
        return [pattern]
    prefix, ranges, suffix = match.groups()
    names = []
    for item in ranges.split(","):
        if "-" in item:
            start, stop = item.split("-")
            names += [f"{prefix}{i:0{len(start)}d}" for i in range(int(start), int(stop) + 1)]
        else:
            names.append(prefix + item)
    return [name for head in names for name in _expand_one(head + suffix)]


def detect(env: Mapping[str, str] = os.environ) -> World:
    """The World this process belongs to; a single-process World when no launcher is found."""
    coordinator = env.get("DLBENCH_COORDINATOR") or env.get("MASTER_ADDR")
    if "RANK" in env and "WORLD_SIZE" in env:  # torchrun and dlbench's own local launcher
        return World(
            rank=_int(env, "RANK"),
            size=_int(env, "WORLD_SIZE"),
            local_rank=_int(env, "LOCAL_RANK", default=0),
            local_size=_int(env, "LOCAL_WORLD_SIZE", default=_int(env, "WORLD_SIZE")),
            node_rank=_int(env, "GROUP_RANK", "NODE_RANK", default=0),
            num_nodes=_int(env, "DLBENCH_NUM_NODES", default=1),
            launcher=env.get("DLBENCH_LAUNCHER", "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env"),
            coordinator=coordinator,
        )
    if "HOROVOD_RANK" in env:  # horovodrun (gloo)
        return World(
            rank=_int(env, "HOROVOD_RANK"),
            size=_int(env, "HOROVOD_SIZE"),
            local_rank=_int(env, "HOROVOD_LOCAL_RANK", default=0),
            local_size=_int(env, "HOROVOD_LOCAL_SIZE", default=1),
            node_rank=_int(env, "HOROVOD_CROSS_RANK", default=0),
            num_nodes=_int(env, "HOROVOD_CROSS_SIZE", default=1),
            launcher="horovodrun",
            coordinator=coordinator,
        )
    if "OMPI_COMM_WORLD_RANK" in env:  # Open MPI's mpirun (also under srun --mpi=pmix: PMIX_RANK)
        size = _int(env, "OMPI_COMM_WORLD_SIZE")
        local_size = _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", default=size)
        return World(
            rank=_int(env, "OMPI_COMM_WORLD_RANK"),
            size=size,
            local_rank=_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", default=0),
            local_size=local_size,
            node_rank=_int(env, "OMPI_COMM_WORLD_NODE_RANK", default=0),
            num_nodes=_int(env, "DLBENCH_NUM_NODES", default=max(1, -(-size // local_size))),
            launcher="mpirun",
            coordinator=coordinator,
        )
    if "PMI_RANK" in env and "SLURM_PROCID" not in env:  # MPICH's Hydra (mpirun.mpich / mpiexec)
        size = _int(env, "PMI_SIZE")
        local_size = _int(env, "MPI_LOCALNRANKS", default=size)
        return World(
            rank=_int(env, "PMI_RANK"),
            size=size,
            local_rank=_int(env, "MPI_LOCALRANKID", default=0),
            local_size=local_size,
            node_rank=_int(env, "DLBENCH_NODE_RANK", default=0),
            num_nodes=_int(env, "DLBENCH_NUM_NODES", default=max(1, -(-size // local_size))),
            launcher="mpich",
            coordinator=coordinator,
        )
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:  # srun (any --mpi plugin)
        nodes = expand_nodelist(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", ""))
        return World(
            rank=_int(env, "SLURM_PROCID"),
            size=_int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"),
            local_rank=_int(env, "SLURM_LOCALID", default=0),
            local_size=_int(env, "SLURM_STEP_TASKS_PER_NODE_LOCAL", default=_tasks_on_this_node(env)),
            node_rank=_int(env, "SLURM_NODEID", default=0),
            num_nodes=_int(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", default=len(nodes) or 1),
            launcher="srun",
            coordinator=coordinator or (nodes[0] if nodes else None),
        )
    return World(coordinator=coordinator)


def _tasks_on_this_node(env: Mapping[str, str]) -> int:
    """SLURM_STEP_TASKS_PER_NODE is '2(x3),1': the entry of this node (SLURM_NODEID)."""
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or "1"
    counts = []
    for item in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if match:
            counts += [int(match.group(1))] * int(match.group(2) or 1)
    node = _int(env, "SLURM_NODEID", default=0)
    return counts[node] if node < len(counts) else 1


def coordinator_host(world: World) -> str:
    """Where process 0 listens. A single-node run needs no name service."""
    if world.coordinator:
        return world.coordinator
    if world.num_nodes == 1 or world.local_size == world.size:
        return "127.0.0.1"
    return socket.gethostname()
