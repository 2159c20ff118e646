"""The limits a rank runs under, read where it runs (inside its container): /dev/shm, the cgroup's CPU
quota, the affinity mask, RLIMIT_MEMLOCK, the PID and IPC namespaces, and whether a peer's memory can
be read with process_vm_readv (record: path.ranks[].limits, docs/results.md#path).

Why: these are what a container runtime silently changes (a 64 MiB /dev/shm, a quota below the threads
used, separate PID namespaces that cost MPI and NCCL their single-copy transfers), and the preflight
(benchmarks/measure/preflight.py) checks a run's needs against them. Every reader says None when it cannot tell.
Only the standard library is imported.
"""

from __future__ import annotations

import ctypes
import os
import resource
from pathlib import Path
from typing import Callable

from .pathprobe import parse_mountinfo


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def dev_shm_bytes(path: str = "/dev/shm") -> int | None:
    """The size of /dev/shm (None when absent): DataLoader workers, NCCL's SHM transport and MPI's
    shared-memory segments live there."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    return stat.f_frsize * stat.f_blocks


def parse_cgroups(text: str) -> dict[str, str]:
    """/proc/self/cgroup: controller -> this process's cgroup path; cgroup v2's unified line as "" ."""
    paths = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2]
    return paths


def _quota_of(directory: str, version: int, read: Callable[[str], str | None]) -> float | None:
    """The CPUs one cgroup directory's own quota allows; None: no quota set there (or unreadable)."""
    try:
        if version == 2:
            text = read(f"{directory}/cpu.max")
            if text is None:
                return None
            quota, period = text.split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        quota, period = read(f"{directory}/cpu.cfs_quota_us"), read(f"{directory}/cpu.cfs_period_us")
        if quota is None or period is None or int(quota) < 0:
            return None
        return int(quota) / int(period)
    except ValueError:
        return None


def cpu_quota(cgroup: str | None, mountinfo: str | None, read: Callable[[str], str | None] = _read) -> float | None:
    """CPUs the cgroup's CPU quota allows this process (quota / period), the smallest along its cgroup's
    ancestors visible in the mount (a parent's quota caps its children); None: no quota, or not readable.
    cgroup v2 (cpu.max) and v1 (cpu.cfs_quota_us / cpu.cfs_period_us) alike, the v1 cpu controller first
    on a hybrid host."""
    if not cgroup or not mountinfo:
        return None
    paths = parse_cgroups(cgroup)
    for mount in parse_mountinfo(mountinfo):
        if mount["fstype"] == "cgroup" and "cpu" in mount["super_options"].split(","):
            version, own = 1, paths.get("cpu")
        elif mount["fstype"] == "cgroup2" and "" in paths:
            version, own = 2, paths[""]
        else:
            continue
        if own is None:
            continue
        root = mount["root"].rstrip("/")
        relative = own[len(root):] if own == root or own.startswith(root + "/") else ""
        directory = mount["mount_point"].rstrip("/") + relative.rstrip("/")
        quotas = []
        while True:
            quota = _quota_of(directory or "/", version, read)
            if quota is not None:
                quotas.append(quota)
            if len(directory) <= len(mount["mount_point"].rstrip("/")):
                break
            directory = directory.rsplit("/", 1)[0]
        if version == 1 or quotas:  # the v1 cpu controller rules on a hybrid host; else the first v2 mount
            return min(quotas) if quotas else None
    return None


def affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def memlock_bytes() -> int | None:
    """RLIMIT_MEMLOCK (None: unlimited): InfiniBand verbs and GPUDirect pin memory under it."""
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def namespace(kind: str) -> str:
    """/proc/self/ns/<kind>, e.g. pid:[4026531836]; "" when not readable."""
    try:
        return os.readlink(f"/proc/self/ns/{kind}")
    except OSError:
        return ""


def cpus_allowed(cpuset: int, quota: float | None) -> float:
    """What the threads of this process can use at once: the affinity mask, capped by the quota."""
    return cpuset if quota is None else min(float(cpuset), quota)


def taken(threads: int | None, data_workers: int) -> dict:
    """This process's limits (the record's Limits, cma left for the peer probe)."""
    return {
        "dev_shm_bytes": dev_shm_bytes(),
        "cpu_quota": cpu_quota(_read("/proc/self/cgroup"), _read("/proc/self/mountinfo")),
        "cpuset": affinity(),
        "threads": threads,
        "data_workers": data_workers,
        "memlock_bytes": memlock_bytes(),
        "pid_namespace": namespace("pid"),
        "ipc_namespace": namespace("ipc"),
        "cma": None,
    }


# -- single-copy (CMA): can this process read a same-node peer's memory? ----------------------------------

CMA_PATTERN_BYTES = 64


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class CmaBuffer:
    """A buffer holding a random pattern that peers try to read with process_vm_readv: what Open MPI's and
    MPICH's single-copy transfers do (same PID namespace visibility, ptrace permission). Kept alive by its
    owner until every peer has read."""

    def __init__(self):
        self.pattern = os.urandom(CMA_PATTERN_BYTES)
        self.buffer = ctypes.create_string_buffer(self.pattern, CMA_PATTERN_BYTES)

    def published(self, host: str) -> dict:
        return {"host": host, "pid": os.getpid(), "address": ctypes.addressof(self.buffer),
                "pattern": self.pattern.hex()}


def can_read(pid: int, address: int, pattern: bytes) -> bool:
    """process_vm_readv of `pattern`'s length at `address` in process `pid` returns `pattern`. False when the
    call fails (no such process in this PID namespace, ptrace denied, a bad address) or reads other bytes."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        readv = libc.process_vm_readv
    except (OSError, AttributeError):
        return False
    readv.restype = ctypes.c_ssize_t
    readv.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec), ctypes.c_ulong,
                      ctypes.c_ulong]
    into = ctypes.create_string_buffer(len(pattern))
    local = _IoVec(ctypes.cast(into, ctypes.c_void_p), len(pattern))
    remote = _IoVec(ctypes.c_void_p(address), len(pattern))
    read = readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    return read == len(pattern) and into.raw == pattern


def cma_with_peers(published: list[dict], rank: int) -> bool | None:
    """Whether this rank reads every other rank of its host (`published`: every rank's CmaBuffer.published, in
    rank order); None when it is alone on its host."""
    mine = published[rank]
    peers = [p for i, p in enumerate(published) if i != rank and p and mine and p["host"] == mine["host"]]
    if not peers:
        return None
    return all(can_read(p["pid"], p["address"], bytes.fromhex(p["pattern"])) for p in peers)
