"""The path a run took: which collective library carried its bytes and how, which communication
libraries were mapped and where they came from, and the limits that cap it — taken inside the
container, on every rank (record section `path`, docs/results.md#path).

Why: a container runtime rarely costs anything itself; what it changes is the path (ranks in separate
PID namespaces lose single-copy CMA, a hook injects the host's MPI, /dev/shm is 64 MiB, a CPU quota is
below the threads used). The comparison report (runners/reporting) sets two runs' `facts` side by side
and names what differs as the first candidate cause of a difference in speed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import defaultdict

from ..measure import limits, pathprobe

MIB = 1024**2


def _yes_no(value: bool | None) -> str:
    return "n/a" if value is None else ("yes" if value else "no")


def _mpi_text(mpi: dict | None) -> str:
    if not mpi:
        return "none"
    parts = [mpi.get("implementation") or "unknown MPI", mpi.get("version") or ""]
    if mpi.get("pml"):
        parts.append(f"pml {mpi['pml']}")
    if mpi.get("btl"):
        parts.append(f"btl {','.join(mpi['btl'])}")
    if mpi.get("device"):
        parts.append(mpi["device"])
    if mpi.get("netmod"):
        parts.append(mpi["netmod"])
    return " ".join(part for part in parts if part)


def _one(values: list[str]) -> str:
    """The ranks' value when they agree, else each distinct value with its ranks."""
    distinct = list(dict.fromkeys(values))
    if len(distinct) == 1:
        return distinct[0]
    return "; ".join(f"{value} (ranks {','.join(str(i) for i, v in enumerate(values) if v == value)})"
                     for value in distinct)


def facts(path: dict | None) -> dict[str, str]:
    """A record's `path` section as named facts, the ranks' values merged (the comparison report's
    unit of difference: two runs differ on the path where a fact's text differs). {} without a section."""
    if not path or not path.get("ranks"):
        return {}
    ranks = path["ranks"]

    def each(get) -> str:
        return _one([get(rank) for rank in ranks])

    def collective(rank: dict) -> str:
        c = rank["collective"]
        text = c.get("library") or "none"
        if c.get("interface"):
            text += f" over {c['interface']}"
        return text

    def nccl(rank: dict) -> str:
        transports = sorted({channel["transport"] for channel in rank["collective"].get("nccl") or []})
        return ",".join(transports) or "n/a"

    def host_libraries(rank: dict) -> str:
        mounted = [f"{lib['name']} ({lib['mount']})" for lib in rank["libraries"] if lib["origin"] == "mount"]
        return ", ".join(sorted(mounted)) or "none"

    def shm(rank: dict) -> str:
        size = rank["limits"]["dev_shm_bytes"]
        return "absent" if size is None else f"{size / MIB:,.0f} MiB"

    def quota(rank: dict) -> str:
        cpus = rank["limits"]["cpu_quota"]
        return "none" if cpus is None else f"{cpus:g} CPUs"

    def single_copy(rank: dict) -> str:
        mpi = rank["collective"].get("mpi") or {}
        mechanism = mpi.get("single_copy")
        cma = rank["limits"].get("cma")
        if mechanism:
            return mechanism if cma is not False or mechanism != "cma" else "cma (not possible: peers unreadable)"
        return {True: "possible", False: "not possible", None: "n/a"}[cma]

    # In the order of likely cause of a slowdown (the report names the first difference as it): what caps the
    # compute itself, then shared memory, then the communication path as the library took it, then what
    # only makes a faster path possible or not (namespaces), then where the libraries came from.
    return {
        "CPU quota": each(quota),
        "CPUs allowed": each(lambda rank: str(rank["limits"]["cpuset"])),
        "threads": each(lambda rank: str(rank["limits"]["threads"] or "framework default")),
        "/dev/shm": each(shm),
        "collective": each(collective),
        "MPI": each(lambda rank: _mpi_text(rank["collective"].get("mpi"))),
        "UCX_TLS": each(lambda rank: rank["collective"].get("ucx_tls") or "unset"),
        "NCCL transports": each(nccl),
        "single-copy (CMA)": each(single_copy),
        "ranks share PID namespace": _yes_no(path.get("shared_pid_namespace")),
        "ranks share IPC namespace": _yes_no(path.get("shared_ipc_namespace")),
        "libraries from mounts": each(host_libraries),
    }


def differences(this: dict | None, reference: dict | None) -> dict[str, tuple[str, str]]:
    """fact -> (this run's, the reference's) where two `path` sections differ; {} when either has none
    (nothing to compare is not a difference)."""
    mine, theirs = facts(this), facts(reference)
    if not mine or not theirs:
        return {}
    return {name: (mine[name], theirs[name]) for name in mine if mine[name] != theirs.get(name)}


# -- taking it -------------------------------------------------------------------------------------------


def _guarded(default, probe, *args):
    """A probe's answer, or `default` when it fails: the measurement stands without it."""
    try:
        return probe(*args)
    except Exception:  # noqa: BLE001 - a fact not read is null, never a failed run
        return default


class Probe:
    """One rank's fingerprint over its run. Made before the framework starts its collective library (so
    that NCCL's INFO log can be asked for, into a file of this rank), it holds the buffer a same-node peer
    reads to test single-copy (CMA) until the run's record is gathered, and takes the rank's `RankPath`
    after the timed loops (when MPI has closed the components it did not select and NCCL has connected)."""

    def __init__(self, rank: int, host: str, library: str | None, environ=os.environ):
        self.rank, self.host, self.library, self.environ = rank, host, library, environ
        self.cma = limits.CmaBuffer()
        self.directory, self.nccl_log = None, None
        if library == "nccl":
            self.directory = tempfile.mkdtemp(prefix="dlbench-nccl-")
            self.nccl_log = pathprobe.capture_nccl_log(environ, self.directory, rank)
        self.own = pathprobe.NCCL_LOG_VARIABLES if self.nccl_log else ()

    def published(self) -> dict:
        """What the other ranks need to read this one's pattern (exchanged through the rendezvous)."""
        return self.cma.published(self.host)

    def take(self, collective: tuple[str | None, str | None], coordinator: str, threads: int | None,
             data_workers: int, published: list[dict] | None) -> dict:
        """This rank's RankPath; `collective`: (library, backend) as the framework selected them; `published`:
        every rank's CmaBuffer.published in rank order (None: not exchanged, cma null)."""
        from .provenance import detect_container_runtime

        library, backend = collective
        mapped = _guarded([], pathprobe.mapped_files)
        now = limits.taken(threads, data_workers)
        now["cma"] = _guarded(None, limits.cma_with_peers, published, self.rank) if published else None
        in_container = _guarded("none", detect_container_runtime) != "none"
        return {
            "rank": self.rank,
            "host": self.host,
            "collective": {
                "library": library,
                "backend": backend,
                "interface": _guarded(None, pathprobe.interface, library, coordinator, self.environ),
                "mpi": _guarded(None, pathprobe.mpi_path, mapped, self.environ, now["cma"]),
                "ucx_tls": self.environ.get("UCX_TLS") or None,
                "nccl": _guarded([], self._nccl_channels),
                "settings": pathprobe.settings(self.environ, self.own),
            },
            "libraries": _guarded([], pathprobe.libraries, mapped, _guarded([], pathprobe.mounts), in_container),
            "limits": now,
        }

    def _nccl_channels(self) -> list[dict]:
        if self.nccl_log is None or not os.path.exists(self.nccl_log):
            return []
        with open(self.nccl_log, errors="replace") as log:
            return pathprobe.parse_nccl_channels(log.read())

    def close(self) -> None:
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


def _shared(ranks: list[dict], key: str) -> bool | None:
    """Whether the ranks of every node share one namespace; None when every node has one rank or a
    namespace was not readable."""
    by_host = defaultdict(list)
    for rank in ranks:
        by_host[rank["host"]].append(rank["limits"][key])
    if all(len(names) == 1 for names in by_host.values()) or any("" in names for names in by_host.values()):
        return None
    return all(len(set(names)) == 1 for names in by_host.values())


def section(ranks: list[dict]) -> dict:
    """The record's `path` from every rank's RankPath, in rank order."""
    return {"ranks": ranks, "shared_pid_namespace": _shared(ranks, "pid_namespace"),
            "shared_ipc_namespace": _shared(ranks, "ipc_namespace")}
