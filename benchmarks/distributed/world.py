"""Rank, world size and peers, read from whatever launched this process.

One process is one rank. Launchers announce ranks in their own variables;
this module maps all of them to one `World`; once the ranks have met, a rank's
place among them is a `Distributed` (what a backend is given), and the record's
`world` section is counted from either (`world_section`). Order matters: a Slurm job step
that runs `mpirun` or `torchrun` inside it carries Slurm variables too, so the
innermost launcher (the one that started this very process) is checked first.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import asdict, dataclass
from typing import Mapping

from ..core.errors import UsageError
from . import strategies
from .strategies import Role


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

    def as_dict(self) -> dict:
        return asdict(self)


def _int(env: Mapping[str, str], *names: str, default: int | None = None) -> int | None:
    for name in names:
        if env.get(name, "").strip().lstrip("-").isdigit():
            return int(env[name])
    return default


def expand_nodelist(nodelist: str) -> list[str]:
    """Slurm's compressed host list ('node[1-3,7],gpu01') as names, without calling scontrol."""
    return [name for part in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", nodelist) for name in _expand_one(part)]


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


@dataclass(frozen=True)
class _Variables:
    """Which variables one launcher uses for each World field."""

    launcher: str
    rank: str
    size: str
    local_rank: str
    local_size: tuple[str, ...]
    node_rank: tuple[str, ...]
    num_nodes: tuple[str, ...]


# Innermost first: a launcher started inside a Slurm step still sees SLURM_*.
LAUNCHER_VARIABLES = (
    # torchrun and dlbench's own local launcher (which sets DLBENCH_LAUNCHER)
    _Variables("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", ("LOCAL_WORLD_SIZE",), ("GROUP_RANK", "NODE_RANK"),
               ("DLBENCH_NUM_NODES",)),
    _Variables("horovodrun", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", ("HOROVOD_LOCAL_SIZE",),
               ("HOROVOD_CROSS_RANK",), ("HOROVOD_CROSS_SIZE", "DLBENCH_NUM_NODES")),
    # Open MPI's mpirun (under srun --mpi=pmix these appear only after MPI_Init: srun is found below)
    _Variables("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
               ("OMPI_COMM_WORLD_LOCAL_SIZE",), ("OMPI_COMM_WORLD_NODE_RANK",), ("DLBENCH_NUM_NODES",)),
    # MPICH's Hydra (mpirun.mpich / mpiexec); srun --mpi=pmi2 also sets PMI_RANK, hence the check below
    _Variables("mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", ("MPI_LOCALNRANKS",), ("DLBENCH_NODE_RANK",),
               ("DLBENCH_NUM_NODES",)),
)


def detect(env: Mapping[str, str] = os.environ) -> World:
    """The World this process belongs to; a single-process World when no launcher is found."""
    coordinator = env.get("DLBENCH_COORDINATOR") or env.get("MASTER_ADDR")
    for names in LAUNCHER_VARIABLES:
        if names.rank not in env or names.size not in env:
            continue
        if names.launcher == "mpich" and "SLURM_PROCID" in env:
            break
        size = _int(env, names.size)
        local_size = _int(env, *names.local_size, default=size)
        launcher = names.launcher
        if launcher == "torchrun":
            launcher = env.get("DLBENCH_LAUNCHER", "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env")
        return World(
            rank=_int(env, names.rank),
            size=size,
            local_rank=_int(env, names.local_rank, default=0),
            local_size=local_size,
            node_rank=_int(env, *names.node_rank, default=0),
            num_nodes=_int(env, *names.num_nodes, default=max(1, -(-size // local_size))),
            launcher=launcher,
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


RUN_TOKEN_ENV = "DLBENCH_RUN_TOKEN"  # benchrun's launchers set it for every rank (runners.launchers.base)


def run_token(env: Mapping[str, str] = os.environ) -> str | None:
    """What every rank of this run agrees on and no other run shares, so that ranks of two runs never
    meet at one rendezvous: benchrun's token, else the launcher's own job identity (Open MPI's PMIx
    namespace, horovodrun's gloo rendezvous, a Slurm job step, a torchrun run id). None under a
    launcher that has none (MPICH's Hydra, plain env variables): set DLBENCH_RUN_TOKEN there."""
    if env.get(RUN_TOKEN_ENV):
        return env[RUN_TOKEN_ENV]
    if env.get("PMIX_NAMESPACE"):
        return f"pmix {env['PMIX_NAMESPACE']}"
    if env.get("HOROVOD_GLOO_RENDEZVOUS_ADDR") and env.get("HOROVOD_GLOO_RENDEZVOUS_PORT"):
        return f"horovodrun {env['HOROVOD_GLOO_RENDEZVOUS_ADDR']}:{env['HOROVOD_GLOO_RENDEZVOUS_PORT']}"
    if env.get("SLURM_JOB_ID") and env.get("SLURM_STEP_ID"):
        return f"slurm {env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}"
    if env.get("TORCHELASTIC_RUN_ID", "none") != "none":
        return f"torchrun {env['TORCHELASTIC_RUN_ID']}"
    return None


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
    # Only process 0 would know its own name: the others would wait for the timeout.
    raise UsageError(
        f"{world.size} ranks on {world.num_nodes} nodes but no address for process 0: "
        "set MASTER_ADDR or DLBENCH_COORDINATOR (benchrun and srun set it for you)"
    )


@dataclass
class Distributed:
    """What a backend needs to know about the other ranks."""

    world: World
    role: Role
    coordinator: str  # host of process 0
    peers: list  # every process's {address, role}, in rank order


SINGLE = Distributed(World(), Role("worker", 0), "127.0.0.1", [])  # a run of one process


def world_section(world: World, strategy: str, num_ps: int, hosts: list[str] | None = None) -> dict:
    """The record's `world`: counted from the hosts of the ranks that met, else (a record written
    before they met, or by the supervisor after its worker died) from the launcher's variables."""
    if hosts:
        names = sorted(set(hosts))
        nodes, per_node = len(names), max(hosts.count(host) for host in names)
    else:
        names, nodes, per_node = [socket.gethostname()], world.num_nodes, world.local_size
    return {
        "rank": world.rank, "processes": world.size,
        "workers": strategies.get(strategy).workers(world.size, num_ps), "num_ps": num_ps, "strategy": strategy,
        "launcher": world.launcher, "nodes": nodes, "processes_per_node": per_node, "hosts": names,
    }
