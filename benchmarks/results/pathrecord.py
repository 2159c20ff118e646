"""The record's models of where a run ran and how it compared (schema 1.18): `comparison` (a run of
`benchrun compare-runtimes`), `path` (the communication path and limits of each rank, benchmarks/results/fingerprint.py)
and `preflight` (benchmarks/measure/preflight.py), with the strict base of every record model and the statistics
record (`StatsRecord`) most sections hold. Apart from record.py,
which imports them, so that the result schema's module stays within the tree's size rule.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    """Every record model's base: a field the schema does not name is refused."""

    model_config = ConfigDict(extra="forbid")


class StatsRecord(_Model):
    n: int
    mean: float
    median: float
    p90: float
    stdev: Optional[float]
    stderr: Optional[float]
    jitter: float = Field(description="1.4826 x median absolute deviation")
    min: float
    max: float


class ComparisonInfo(_Model):
    id: str = Field(description="the comparison's id: the same in every run of one compare-runtimes --out directory, resumed "
                                "invocations included")
    seed: int = Field(description="the seed of every round's random order (--seed)")
    round: int = Field(description="1 for the first round")
    position: int = Field(description="1 for the runtime that ran first in its round")
    order: list[str] = Field(description="the round's runtimes in the order they ran")


class LibraryInfo(_Model):
    kind: Literal["mpi", "ucx", "libfabric", "nccl", "cuda", "openmp"] = Field(description="what the library does on the path")
    name: str = Field(description="its file name as mapped, e.g. libmpi.so.40.30.4")
    path: str
    version: Optional[str] = Field(description="from the file name's version suffix or the library itself; "
                                               "null when not readable")
    origin: Literal["image", "mount", "host"] = Field(description="image: on the container's own root file system; mount: on a "
                                                                  "file system the runtime mounted into it (the host's, "
                                                                  "bind-mounted or injected by a hook); host: no container")
    mount: Optional[str] = Field(description="the mount point it lies under, for origin mount")


class MpiPath(_Model):
    implementation: Optional[Literal["open-mpi", "mpich", "intel-mpi", "mvapich", "other"]]
    version: Optional[str]
    library_version: Optional[str] = Field(description="the first line of MPI_Get_library_version")
    components: list[str] = Field(description="Open MPI's MCA components loaded in the process (framework_component, e.g. "
                                              "pml_ob1, btl_vader, smsc_cma)")
    pml: Optional[str] = Field(description="Open MPI's point-to-point layer in use (ob1, ucx, cm)")
    btl: list[str] = Field(description="Open MPI's byte transfer layers in use (self, vader/sm, tcp, ...)")
    single_copy: Optional[str] = Field(description="the shared-memory single-copy mechanism: cma, xpmem, knem, none; null when "
                                                   "not known")
    device: Optional[str] = Field(description="MPICH's device, e.g. ch4:ofi, ch3:nemesis")
    netmod: Optional[str] = Field(description="MPICH's netmod or libfabric provider, e.g. ofi (tcp), ucx")


class NcclChannel(_Model):
    channel: int
    source: int = Field(description="rank")
    target: int = Field(description="rank")
    transport: str = Field(description="as NCCL's INFO log names it: P2P/IPC, P2P/direct pointer, SHM, NET/IB/0, NET/Socket/0, "
                                       "NVLS, CollNet, with /GDRDMA where GPU Direct RDMA is used")


class CollectivePath(_Model):
    library: Optional[Literal["gloo", "nccl", "mpi", "grpc", "ring"]] = Field(description="what carries the ranks' gradients: "
                                                                                          "torch.distributed's gloo or nccl, MPI "
                                                                                          "(Horovod), TensorFlow's gRPC "
                                                                                          "(parameter servers) or its collective "
                                                                                          "ring; null for one rank")
    backend: Optional[str] = Field(description="as the framework names it (torch.distributed.get_backend(), "
                                               "Horovod's controller)")
    interface: Optional[str] = Field(description="the network interface the library was told or picked (GLOO_SOCKET_IFNAME, "
                                                 "NCCL_SOCKET_IFNAME, ...)")
    mpi: Optional[MpiPath] = Field(description="the MPI library the process loaded; null without one")
    ucx_tls: Optional[str] = Field(description="UCX_TLS as set (null: UCX picks every transport it can)")
    nccl: list[NcclChannel] = Field(default_factory=list, description="per channel and peer, from NCCL's INFO log (GPU runs with "
                                                                      "NCCL_DEBUG=INFO)")
    settings: dict[str, str] = Field(default_factory=dict, description="the variables that steer the path, as set: OMPI_MCA_*, "
                                                                       "UCX_*, FI_*, NCCL_*, GLOO_*, MPIR_CVAR_*, I_MPI_*, "
                                                                       "HOROVOD_*")


class Limits(_Model):
    dev_shm_bytes: Optional[int] = Field(description="size of /dev/shm; null when absent")
    cpu_quota: Optional[float] = Field(description="CPUs the cgroup's CPU quota allows (quota / period); null: no quota")
    cpuset: int = Field(description="CPUs this process may run on (its affinity mask)")
    threads: Optional[int] = Field(description="compute threads the framework uses (intra-op)")
    data_workers: int = Field(description="input-pipeline worker processes (--num-data-workers with --data-dir; else 0)")
    memlock_bytes: Optional[int] = Field(description="RLIMIT_MEMLOCK; null: unlimited")
    pid_namespace: str = Field(description="/proc/self/ns/pid, e.g. pid:[4026531836]")
    ipc_namespace: str = Field(description="/proc/self/ns/ipc")
    cma: Optional[bool] = Field(description="another rank of this node could be read with process_vm_readv (single-copy, as Open "
                                            "MPI and MPICH use it); null: no other rank on this node")


class RankPath(_Model):
    rank: int
    host: str
    collective: CollectivePath
    libraries: list[LibraryInfo] = Field(description="the communication and threading libraries mapped into the process")
    limits: Limits


class PathInfo(_Model):
    ranks: list[RankPath] = Field(description="per process of the run, in rank order, each taken in its own container")
    shared_pid_namespace: Optional[bool] = Field(description="the ranks of every node share one PID namespace; null: one rank "
                                                             "per node")
    shared_ipc_namespace: Optional[bool] = Field(description="the ranks of every node share one IPC namespace; null: one rank "
                                                             "per node")


class PreflightCheck(_Model):
    name: Literal["threads", "shared-memory", "gpu"] = Field(description="threads: compute threads against the CPUs the cgroup "
                                                                         "and affinity allow; shared-memory: /dev/shm against "
                                                                         "the data workers and the transport; gpu: a GPU visible "
                                                                         "when one is asked for")
    rank: int
    ok: bool
    detail: str = Field(description="what was compared, in one sentence")


class PreflightInfo(_Model):
    ok: bool = Field(description="every check of every rank passed")
    strict: bool = Field(description="--strict-preflight: a failed check refuses the run (exit 2) instead of labelling it")
    checks: list[PreflightCheck]
    reasons: list[str] = Field(description="the failed checks' details, 'rank N: ...'")
