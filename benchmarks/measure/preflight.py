"""What a run needs, checked on every rank before the model is built against the limits it runs under
(benchmarks/measure/limits.py): compute threads against the CPUs allowed, /dev/shm against the input pipeline's
and the transport's segments, a GPU when one is asked for (record section `preflight`, docs/results.md).

Why: a container's 64 MiB /dev/shm or a CPU quota below the threads used does not fail a run, it slows
it (or kills a data worker mid-run), and the number then blames the runtime. A failed check labels the
record and bench says so in one line; --strict-preflight refuses the run instead (exit 2, nothing run).
"""

from __future__ import annotations

from . import limits

MIB = 1024**2
# /dev/shm a collective library holds per other rank of the same node (docs/results.md#preflight):
# NCCL's SHM transport maps one segment per peer and direction (9,637,888 bytes each with the default
# NCCL_BUFFSIZE: the size NCCL names when /dev/shm is too small); Open MPI's shared-memory BTL (vader/sm)
# a 4 MiB segment per local process, and MPICH's nemesis its queues of similar size. Socket transports
# (gloo, gRPC, TF's ring) use none.
SHM_PER_LOCAL_PEER = {"nccl": 2 * 9_637_888, "mpi": 4 * MIB}


def _mib(n: float) -> str:
    return f"{n / MIB:,.1f} MiB"


def threads_check(rank: int, threads: int | None, now: dict) -> dict | None:
    """Compute threads against min(affinity mask, cgroup quota); None when the framework picks its threads
    at run time (nothing to compare)."""
    if threads is None:
        return None
    allowed = limits.cpus_allowed(now["cpuset"], now["cpu_quota"])
    quota = "" if now["cpu_quota"] is None else f", cgroup quota {now['cpu_quota']:g}"
    return {"name": "threads", "rank": rank, "ok": threads <= allowed,
            "detail": f"{threads} threads on {allowed:g} CPUs allowed (affinity {now['cpuset']}{quota})"}


def shared_memory_check(rank: int, data_bytes: int, data_workers: int, library: str | None, local_peers: int,
                        now: dict) -> dict:
    """/dev/shm against the input pipeline's batches in flight (`data_bytes`, the backend's estimate) plus the
    collective library's segments per other rank of this node."""
    transport = SHM_PER_LOCAL_PEER.get(library or "", 0) * local_peers
    need, size = data_bytes + transport, now["dev_shm_bytes"]
    parts = []
    if data_bytes:
        parts.append(f"{data_workers} data workers' batches {_mib(data_bytes)}")
    if transport:
        parts.append(f"{library} {_mib(transport)} for {local_peers} local peers")
    wanted = " + ".join(parts) or "nothing"
    have = "no /dev/shm" if size is None else f"/dev/shm {_mib(size)}"
    return {"name": "shared-memory", "rank": rank, "ok": need == 0 or (size is not None and need <= size),
            "detail": f"{have} for {wanted}"}


def gpu_check(rank: int, device: str, gpus: int | None) -> dict | None:
    """--device gpu against the GPUs the framework sees; None when none is asked for or the count is unknown."""
    if device != "gpu" or gpus is None:
        return None
    return {"name": "gpu", "rank": rank, "ok": gpus > 0, "detail": f"--device gpu with {gpus} GPUs visible"}


def checks(rank: int, now: dict, *, threads: int | None, device: str, gpus: int | None, data_bytes: int,
           library: str | None, local_peers: int) -> list[dict]:
    """This rank's PreflightChecks."""
    found = [threads_check(rank, threads, now),
             shared_memory_check(rank, data_bytes, now["data_workers"], library, local_peers, now),
             gpu_check(rank, device, gpus)]
    return [check for check in found if check is not None]


def section(per_rank: list[list[dict]], strict: bool) -> dict:
    """The record's `preflight` from every rank's checks, in rank order."""
    every = [check for rank_checks in per_rank for check in rank_checks]
    reasons = [f"rank {c['rank']}: {c['detail']}" for c in every if not c["ok"]]
    return {"ok": not reasons, "strict": strict, "checks": every, "reasons": reasons}


def line(preflight: dict) -> str:
    """The one line bench says of a failed preflight (without its `bench: ` prefix)."""
    reasons = "; ".join(preflight["reasons"])
    if preflight["strict"]:
        return f"preflight: {reasons}; --strict-preflight refuses the run (nothing was run)"
    return f"preflight: {reasons}; the run goes on (--strict-preflight refuses)"
