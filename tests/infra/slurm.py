"""Pytest fixtures for a real local Slurm cluster and for MPI launchers.

The cluster is scripts/local-slurm.sh: slurmctld + one slurmd per emulated
node (node1, node2 on 127.0.0.1), started for the test session and stopped at
its end. Use it from a test module either by explicit import:

    from infra.slurm import slurm_single, slurm_two_nodes, mpi_flavours  # noqa: F401

or for every test module at once, in tests/conftest.py:

    pytest_plugins = ["infra.slurm"]

Both ways share one cluster per kind: the clusters are reference-counted
here, not per fixture definition.

Skips are LOUD and happen only when Slurm/MPI truly cannot be had here: not a
Debian system, not root, or the packages cannot be installed (apt
unreachable). Once the packages are installed, a cluster that does not start
is a test error, never a skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
LOCAL_SLURM = SCRIPTS / "local-slurm.sh"
ENSURE_PACKAGES = SCRIPTS / "ensure-packages.sh"
MPI_HELLO_C = Path(__file__).resolve().parent / "mpi_hello.c"

# libpmix-dev: Slurm's pmix plugin dlopens the unversioned libpmix.so.
SLURM_PACKAGES = ("slurm-wlm", "munge", "libpmix-dev")
START_TIMEOUT = 300  # seconds, includes a first-time apt install
STOP_TIMEOUT = 60


def _loud(reason: str) -> str:
    return f"!!!!! {reason} !!!!!"


def skip_loudly(reason: str):
    """pytest.skip with a reason nobody can miss (also a warning in the summary)."""
    message = _loud(reason)
    warnings.warn(message, pytest.PytestWarning, stacklevel=2)
    pytest.skip(message)


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without the variables of an enclosing Slurm job or PMI
    launcher (pytest itself may run inside one), plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PMI_", "PMIX_"))}
    env.update(extra)
    return env


def packages_installed(packages) -> bool:
    if shutil.which("dpkg-query") is None:
        return False
    for pkg in packages:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True, check=False
        ).stdout
        if out.strip() != "install ok installed":
            return False
    return True


def ensure_packages_or_skip(packages, what: str) -> None:
    """Install the Debian packages via scripts/ensure-packages.sh; skip LOUDLY
    (only) when that is impossible here."""
    packages = tuple(packages)
    if packages_installed(packages):
        return
    if shutil.which("dpkg-query") is None or shutil.which("apt-get") is None:
        skip_loudly(f"{what} TESTS SKIPPED: not a Debian/apt system, cannot install {' '.join(packages)}")
    if os.geteuid() != 0:
        skip_loudly(f"{what} TESTS SKIPPED: not root, cannot install {' '.join(packages)}")
    try:
        result = subprocess.run(
            [str(ENSURE_PACKAGES), *packages],
            capture_output=True, text=True, timeout=START_TIMEOUT, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        skip_loudly(f"{what} TESTS SKIPPED: installing {' '.join(packages)} took over {START_TIMEOUT}s")
    if result.returncode != 0:
        tail = " | ".join((result.stderr or result.stdout).strip().splitlines()[-5:])
        skip_loudly(f"{what} TESTS SKIPPED: cannot install {' '.join(packages)} (apt unreachable?): {tail}")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_port_base(span: int, start: int = 16900, stop: int = 19900) -> int:
    """A port P such that P..P+span-1 are all free (slurmctld + slurmds)."""
    # Spread concurrent pytest sessions (other worktrees) over the range.
    offset = (os.getpid() % 100) * 10
    for i in range(0, stop - start, 10):
        base = start + (offset + i) % (stop - start)
        if all(_port_free(base + k) for k in range(span)):
            return base
    raise RuntimeError(f"no {span} free ports in {start}-{stop}")


def cluster_processes(conf: str) -> list:
    """Live (non-zombie) processes whose command line names this slurm.conf."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if conf in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def run_script(*args: str, env: dict | None = None, timeout: float = START_TIMEOUT) -> subprocess.CompletedProcess:
    """Run scripts/local-slurm.sh with captured output (the daemons it starts
    must not keep the pipes open, or this would hang until timeout)."""
    return subprocess.run(
        [str(LOCAL_SLURM), *args],
        capture_output=True, text=True, timeout=timeout,
        env=env if env is not None else clean_env(), stdin=subprocess.DEVNULL,
    )


@dataclass
class _Cluster:
    info: dict
    users: int = 0


_clusters: dict[int, _Cluster] = {}


def start_cluster(nodes: int, directory: str | None = None, port: int | None = None) -> dict:
    """Start a local cluster (packages installed first; skip loudly only if
    they cannot be). Returns the info dict the fixtures yield."""
    if os.geteuid() != 0:
        skip_loudly("SLURM TESTS SKIPPED: local-slurm.sh needs root (starts munged/slurmctld/slurmd)")
    ensure_packages_or_skip(SLURM_PACKAGES, "SLURM")
    # Short, per-session paths: concurrent pytest sessions don't collide, and
    # the pmix sockets under TmpFS stay under the 108-byte unix-socket limit.
    directory = directory or f"/tmp/dlb-slurm-{os.getpid()}-n{nodes}"
    port = port or free_port_base(nodes + 1)
    t0 = time.monotonic()
    result = run_script("start", "--nodes", str(nodes), "--dir", directory, "--port", str(port))
    seconds = time.monotonic() - t0
    if result.returncode != 0:
        pytest.fail(
            f"local-slurm.sh start --nodes {nodes} failed (rc={result.returncode}):\n{result.stderr}{result.stdout}",
            pytrace=False,
        )
    conf = f"{directory}/slurm.conf"
    assert result.stdout.strip() == f"export SLURM_CONF={conf}", result.stdout
    return {
        "env": clean_env(SLURM_CONF=conf),
        "conf": conf,
        "dir": directory,
        "port": port,
        "nodes": [f"node{i}" for i in range(1, nodes + 1)],
        "partition": "debug",
        "cpus_per_node": 2,
        "start_seconds": seconds,
        "start_stderr": result.stderr,
    }


def stop_cluster(info: dict, remove_dir: bool = True) -> None:
    """Stop a cluster and check that none of its processes is left."""
    result = run_script("stop", "--dir", info["dir"], timeout=STOP_TIMEOUT)
    assert result.returncode == 0, f"local-slurm.sh stop failed:\n{result.stderr}{result.stdout}"
    left = cluster_processes(info["conf"])
    assert not left, f"processes of {info['conf']} left after stop: {[p.info for p in left]}"
    if remove_dir and not os.environ.get("DLBENCH_KEEP_SLURM_DIR"):
        shutil.rmtree(info["dir"], ignore_errors=True)


def _acquire(nodes: int) -> dict:
    cluster = _clusters.get(nodes)
    if cluster is None:
        cluster = _clusters[nodes] = _Cluster(start_cluster(nodes))
    cluster.users += 1
    return cluster.info


def _release(nodes: int) -> None:
    cluster = _clusters[nodes]
    cluster.users -= 1
    if cluster.users == 0:
        del _clusters[nodes]
        stop_cluster(cluster.info)


@pytest.fixture(scope="session")
def slurm_single():
    """A one-node cluster (node1, 2 CPUs). Yields {"env", "conf", "dir",
    "port", "nodes", "partition", "cpus_per_node", "start_seconds", ...};
    run srun/sbatch with env=cluster["env"] (it carries SLURM_CONF)."""
    info = _acquire(1)
    yield info
    _release(1)


@pytest.fixture(scope="session")
def slurm_two_nodes():
    """A two-node cluster (node1, node2 emulated on this host, 2 CPUs each)."""
    info = _acquire(2)
    yield info
    _release(2)


# ---------------------------------------------------------------- MPI


@dataclass(frozen=True)
class MpiFlavour:
    name: str
    packages: tuple[str, ...]
    mpirun: tuple[str, ...]  # launcher argv prefix, outside Slurm
    mpicc: str
    srun_mpi: str  # srun --mpi=<this>
    library: str  # substring of MPI_Get_library_version
    # Keep inter-"node" traffic on loopback: the emulated nodes share this
    # host, and interfaces that come and go (docker veths) must not matter.
    env: dict = field(default_factory=dict)


OPENMPI = MpiFlavour(
    name="openmpi",
    packages=("openmpi-bin", "libopenmpi-dev"),
    mpirun=("mpirun", "--allow-run-as-root", "--oversubscribe"),
    mpicc="mpicc.openmpi",
    srun_mpi="pmix",
    library="Open MPI",
    env={"OMPI_MCA_btl_tcp_if_include": "lo"},
)
MPICH = MpiFlavour(
    name="mpich",
    packages=("mpich", "libmpich-dev"),
    mpirun=("mpirun.mpich",),
    mpicc="mpicc.mpich",
    srun_mpi="pmi2",
    library="MPICH",
    env={"UCX_NET_DEVICES": "lo"},
)
MPI_FLAVOURS = {f.name: f for f in (OPENMPI, MPICH)}


def require_openmpi() -> list[str]:
    """Ensure Open MPI is installed (skip loudly if it cannot be); return the
    mpirun argv prefix."""
    ensure_packages_or_skip(OPENMPI.packages, "OPEN MPI")
    return list(OPENMPI.mpirun)


def require_mpich() -> list[str]:
    """Ensure MPICH is installed (skip loudly if it cannot be); return the
    mpirun argv prefix."""
    ensure_packages_or_skip(MPICH.packages, "MPICH")
    return list(MPICH.mpirun)


@pytest.fixture(scope="session")
def mpi_flavours() -> dict[str, MpiFlavour]:
    """Both MPI flavours installed: {"openmpi": OPENMPI, "mpich": MPICH}."""
    require_openmpi()
    require_mpich()
    return dict(MPI_FLAVOURS)


def build_mpi_hello(flavour: MpiFlavour, outdir: Path) -> Path:
    """Compile tests/infra/mpi_hello.c with the flavour's mpicc."""
    exe = Path(outdir) / f"mpi_hello_{flavour.name}"
    result = subprocess.run(
        [flavour.mpicc, "-O1", "-o", str(exe), str(MPI_HELLO_C)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"{flavour.mpicc} failed:\n{result.stderr}"
    return exe


def parse_mpi_hello(stdout: str) -> list[dict]:
    """The MPI_HELLO lines of mpi_hello's output, as dicts, sorted by rank."""
    rows = []
    for line in stdout.splitlines():
        if not line.startswith("MPI_HELLO "):
            continue
        fields = dict(part.split("=", 1) for part in line.split(" ", 4)[1:4])
        rows.append({"rank": int(fields["rank"]), "size": int(fields["size"]),
                     "sum": int(fields["sum"]), "lib": line.split("lib=", 1)[1]})
    return sorted(rows, key=lambda r: r["rank"])
