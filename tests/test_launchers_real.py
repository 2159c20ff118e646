"""bench ranks started by real MPI launchers and a real local Slurm (started by tests/infra)."""

import json
import os
import subprocess
import sys

import pytest

from infra.helpers import ROOT, ports, validate_record
from infra.slurm import clean_env, require_mpich, require_openmpi

pytestmark = pytest.mark.slow
DDP = ["--framework", "torch", "--strategy", "ddp", "--model", "alexnet", "--image-size", "64", "--batch-size", "2",
       "--num-warmup-batches", "1", "--num-batches", "2", "--num-threads", "1", "--json", *ports()]


def run_launch(launcher, env, *extra):
    result = subprocess.run(
        [sys.executable, "-m", "runners", "launch", "--launcher", launcher, "-n", "2", *extra, "--", *DDP],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, result.stdout
    record = validate_record(json.loads(lines[0]))
    assert record["status"] == "ok" and len(record["ranks"]) == 2 and record["replicas"]["in_sync"]
    assert record["throughput"]["total_images"] == 8
    return record


def test_open_mpi_mpirun():
    require_openmpi()
    record = run_launch("mpirun", {**os.environ, "OMPI_MCA_btl_tcp_if_include": "lo"})
    assert record["world"]["launcher"] == "mpirun"


def test_mpich_hydra():
    require_mpich()
    record = run_launch("mpich", {**os.environ, "UCX_NET_DEVICES": "lo"})
    assert record["world"]["launcher"] == "mpich"


def test_srun_one_node(slurm_single):
    # Emulated Slurm nodes have names that do not resolve: point ranks at loopback.
    env = {**slurm_single["env"], "DLBENCH_COORDINATOR": "127.0.0.1"}
    record = run_launch("srun", env)
    assert record["world"]["launcher"] == "srun" and record["world"]["nodes"] == 1


def test_srun_two_emulated_nodes(slurm_two_nodes):
    env = {**slurm_two_nodes["env"], "DLBENCH_COORDINATOR": "127.0.0.1"}
    record = run_launch("srun", env, "--launcher-arg=--nodes=2")
    assert record["world"]["nodes"] == 2 and sorted(record["world"]["hosts"]) == ["node1", "node2"]
    assert {r["host"] for r in record["ranks"]} == {"node1", "node2"}
