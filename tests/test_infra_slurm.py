"""The local Slurm cluster and MPI launchers, for real: daemons started by
scripts/local-slurm.sh, jobs run with srun/sbatch, MPI programs compiled with
mpicc and launched by srun (--mpi=pmix / --mpi=pmi2) and by mpirun."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from infra.slurm import (  # noqa: F401  (fixtures are used by name)
    ENSURE_PACKAGES,
    LOCAL_SLURM,
    MPI_FLAVOURS,
    build_mpi_hello,
    clean_env,
    cluster_processes,
    free_port_base,
    mpi_flavours,
    parse_mpi_hello,
    require_mpich,
    require_openmpi,
    run_script,
    slurm_single,
    slurm_two_nodes,
    start_cluster,
    stop_cluster,
)

if importlib.util.find_spec("pytest_timeout"):
    pytestmark = pytest.mark.timeout(180)

SLURM_VARS = ["SLURM_PROCID", "SLURM_NODEID", "SLURM_NNODES", "SLURM_NTASKS", "SLURMD_NODENAME", "SLURM_JOB_ID"]
PRINT_ENV = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {SLURM_VARS!r}}}), flush=True)"


def run(argv, env, timeout=60, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL, **kwargs)
    assert result.returncode == 0, f"{argv} -> rc={result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def task_envs(stdout: str) -> list[dict]:
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return sorted(rows, key=lambda r: int(r["SLURM_PROCID"]))


# ------------------------------------------------------------ scripts' CLI


def test_ensure_packages_usage_and_noop():
    for argv in ([], ["--bogus"]):
        r = subprocess.run([str(ENSURE_PACKAGES), *argv], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, r
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    t0 = time.monotonic()
    r = subprocess.run([str(ENSURE_PACKAGES), "coreutils", "bash"], capture_output=True, text=True, timeout=30)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert time.monotonic() - t0 < 5  # installed already: no apt-get at all


def test_local_slurm_usage():
    for argv in ([], ["bogus"], ["start", "--nodes", "3"], ["stop", "--nodes", "2"], ["start", "--port", "x"]):
        r = subprocess.run([str(LOCAL_SLURM), *argv], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (argv, r)
        assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, (argv, r.stderr)


# ------------------------------------------------------------ single node


@pytest.mark.slow
def test_srun_mpi_list(slurm_single):
    out = run(["srun", "--mpi=list"], slurm_single["env"]).stdout
    plugins = {line.strip() for line in out.splitlines()}
    # Debian 12 slurm-wlm 22.05: pmix (v4), pmi2, none, cray_shasta.
    assert {"pmix", "pmi2", "none"} <= plugins, out


@pytest.mark.slow
def test_single_node_srun(slurm_single):
    env = slurm_single["env"]
    hosts = run(["srun", "-n", "2", "hostname"], env).stdout.split()
    assert hosts == [socket.gethostname()] * 2
    rows = task_envs(run(["srun", "-n", "2", sys.executable, "-c", PRINT_ENV], env).stdout)
    assert [r["SLURM_PROCID"] for r in rows] == ["0", "1"]
    assert {r["SLURM_NODEID"] for r in rows} == {"0"}
    assert {r["SLURM_NNODES"] for r in rows} == {"1"}
    assert {r["SLURM_NTASKS"] for r in rows} == {"2"}
    assert {r["SLURMD_NODENAME"] for r in rows} == {"node1"}
    assert len({r["SLURM_JOB_ID"] for r in rows}) == 1


@pytest.mark.slow
def test_sinfo_shows_idle_node(slurm_single):
    """The node, its 2 CPUs, idle: once the job an earlier test ran on this cluster has finished
    completing (`comp` for a moment after it ends)."""
    deadline = time.monotonic() + 60
    while True:
        out = run(["sinfo", "-h", "-N", "-o", "%N %t %c"], slurm_single["env"]).stdout.split("\n")
        if "node1 idle 2" in out or time.monotonic() > deadline or out[0] != "node1 comp 2":
            break
        time.sleep(0.5)
    assert "node1 idle 2" in out


# ------------------------------------------------------------ two nodes


@pytest.mark.slow
def test_two_nodes_srun(slurm_two_nodes):
    env = slurm_two_nodes["env"]
    assert slurm_two_nodes["nodes"] == ["node1", "node2"]
    rows = task_envs(run(["srun", "-N", "2", "-n", "2", sys.executable, "-c", PRINT_ENV], env).stdout)
    assert [(r["SLURM_PROCID"], r["SLURM_NODEID"], r["SLURMD_NODENAME"]) for r in rows] == [
        ("0", "0", "node1"),
        ("1", "1", "node2"),
    ]
    assert {r["SLURM_NNODES"] for r in rows} == {"2"}
    assert {r["SLURM_NTASKS"] for r in rows} == {"2"}


@pytest.mark.slow
def test_two_nodes_sbatch_wait(slurm_two_nodes, tmp_path):
    """Batch submission as a runner would do it: sbatch, poll the job, read the output file."""
    env = slurm_two_nodes["env"]
    (tmp_path / "print_env.py").write_text(PRINT_ENV + "\n")
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\nsrun {sys.executable} {tmp_path / 'print_env.py'}\n")
    out = tmp_path / "job.out"
    # Not `sbatch --wait`: it polls with growing sleeps (2 s to 10 s seen here).
    t0 = time.monotonic()
    job = run(["sbatch", "--parsable", "-N", "2", "-n", "2", f"--output={out}", f"--chdir={tmp_path}", str(script)],
              env).stdout.strip().split(";")[0]
    while True:
        state = run(["scontrol", "show", "job", "-o", job], env).stdout
        state = state.split("JobState=", 1)[1].split()[0]
        if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            break
        assert time.monotonic() - t0 < 60, f"job {job} still {state}"
        time.sleep(0.2)
    assert state == "COMPLETED", f"job {job}: {state}\n{out.read_text() if out.exists() else ''}"
    rows = task_envs(out.read_text())
    assert [(r["SLURM_PROCID"], r["SLURMD_NODENAME"]) for r in rows] == [("0", "node1"), ("1", "node2")]


# ------------------------------------------------------------ MPI


@pytest.fixture(scope="session")
def mpi_hello(mpi_flavours, tmp_path_factory) -> dict[str, Path]:
    outdir = tmp_path_factory.mktemp("mpi")
    return {name: build_mpi_hello(flavour, outdir) for name, flavour in mpi_flavours.items()}


def check_hello(stdout: str, flavour, size: int = 2) -> None:
    rows = parse_mpi_hello(stdout)
    assert [r["rank"] for r in rows] == list(range(size)), stdout
    assert {r["size"] for r in rows} == {size}, stdout
    assert {r["sum"] for r in rows} == {size * (size - 1) // 2}, stdout  # allreduce really ran
    assert all(flavour.library in r["lib"] for r in rows), stdout


def test_require_mpi_helpers():
    assert require_openmpi() == ["mpirun", "--allow-run-as-root", "--oversubscribe"]
    assert require_mpich() == ["mpirun.mpich"]


@pytest.mark.slow
@pytest.mark.parametrize("cluster", ["slurm_single", "slurm_two_nodes"])
@pytest.mark.parametrize("name", ["openmpi", "mpich"])
def test_mpi_under_srun(name, cluster, mpi_hello, request):
    """Open MPI: srun --mpi=pmix; MPICH: srun --mpi=pmi2; 2 ranks on 1 or 2 nodes."""
    flavour = MPI_FLAVOURS[name]
    info = request.getfixturevalue(cluster)
    nodes = len(info["nodes"])
    env = dict(info["env"], **flavour.env)
    out = run(["srun", f"--mpi={flavour.srun_mpi}", "-N", str(nodes), "-n", "2", str(mpi_hello[name])], env).stdout
    check_hello(out, flavour)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["openmpi", "mpich"])
def test_mpi_under_mpirun(name, mpi_hello):
    """Plain mpirun (no Slurm): Open MPI's mpirun and MPICH's mpirun.mpich."""
    flavour = MPI_FLAVOURS[name]
    env = clean_env(**flavour.env)
    out = run([*flavour.mpirun, "-n", "2", str(mpi_hello[name])], env).stdout
    check_hello(out, flavour)
    if name == "openmpi":  # more ranks than cores needs --oversubscribe
        check_hello(run([*flavour.mpirun, "-n", "3", str(mpi_hello[name])], env).stdout, flavour, size=3)


# ------------------------------------------------------------ lifecycle


def daemon_pids(directory: str) -> set[int]:
    files = [Path(directory, "slurmctld.daemon.pid"), *Path(directory).glob("node*/slurmd.daemon.pid")]
    return {int(f.read_text()) for f in files}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_start_is_idempotent_and_stop_leaves_nothing():
    """Own cluster (own dir and ports): start twice, status, a job, stop, stop again."""
    directory = f"/tmp/dlb-slurm-life-{os.getpid()}"
    info = start_cluster(2, directory=directory)  # asserts the export line
    env, conf = info["env"], info["conf"]
    try:
        pids = daemon_pids(directory)
        assert len(pids) == 3 and all(alive(p) for p in pids)

        t0 = time.monotonic()
        again = run_script("start", "--nodes", "2", "--dir", directory, "--port", str(info["port"]))
        assert again.returncode == 0, again.stderr
        assert again.stdout == f"export SLURM_CONF={conf}\n"
        assert "already running" in again.stderr
        assert time.monotonic() - t0 < 10
        assert daemon_pids(directory) == pids  # nothing restarted

        clash = run_script("start", "--nodes", "1", "--dir", directory)
        assert clash.returncode == 1 and "already running" in clash.stderr

        status = run_script("status", "--dir", directory, timeout=30)
        assert status.returncode == 0, status
        assert "node1" in status.stdout and "node2" in status.stdout

        run(["srun", "-N", "2", "-n", "2", "true"], env)
    finally:
        stop_cluster(info, remove_dir=False)  # asserts rc 0 and no process of conf left
    assert not any(alive(p) for p in pids)
    assert not cluster_processes(conf)
    status = run_script("status", "--dir", directory, timeout=30)
    assert status.returncode == 3, status
    assert run_script("stop", "--dir", directory, timeout=30).returncode == 0  # stop twice: fine
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.slow
def test_start_failure_is_reported_and_cleaned_up(tmp_path):
    """A slurmd that cannot start: one-line error, log tails, nothing left."""
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / "slurmd").write_text("#!/bin/sh\necho 'fake slurmd: refusing to start' >&2\nexit 1\n")
    (fakebin / "slurmd").chmod(0o755)
    directory = str(tmp_path / "c")
    env = clean_env(PATH=f"{fakebin}:{os.environ['PATH']}", DLBENCH_SLURM_TIMEOUT="3")
    r = run_script("start", "--dir", directory, "--port", str(free_port_base(2)), env=env, timeout=60)
    assert r.returncode == 1, r
    assert r.stdout == ""
    assert r.stderr.splitlines()[0].startswith("local-slurm: error: nodes not idle after 3s"), r.stderr
    assert "fake slurmd: refusing to start" in r.stderr  # the daemon's log tail
    assert not cluster_processes(f"{directory}/slurm.conf")


@pytest.mark.slow
def test_port_in_use_is_refused(tmp_path):
    port = free_port_base(2)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ports of stopped clusters in TIME_WAIT
        s.bind(("127.0.0.1", port))
        s.listen()
        r = run_script("start", "--dir", str(tmp_path / "c"), "--port", str(port), timeout=60)
    assert r.returncode == 1
    assert f"port {port} is in use" in r.stderr


def test_skip_is_loud_when_packages_cannot_be_had(monkeypatch):
    """No dpkg/apt (e.g. a non-Debian CI runner): a loud skip, not a failure."""
    import infra.slurm as infra_slurm

    monkeypatch.setattr(infra_slurm.shutil, "which", lambda name: None)
    with pytest.warns(pytest.PytestWarning, match="SLURM TESTS SKIPPED"):
        with pytest.raises(pytest.skip.Exception, match=r"^!!!!! SLURM TESTS SKIPPED: not a Debian"):
            infra_slurm.ensure_packages_or_skip(infra_slurm.SLURM_PACKAGES, "SLURM")
