"""bench ranks started by real MPI launchers and a real local Slurm (started by tests/infra).

Under Open MPI and under srun over two emulated nodes, one test per launcher also runs what
issue 12 asks of every launcher: a traced 1-vs-2-rank DDP pair and a `bench comm` record whose
report explains the scaling loss (parts adding up); over two nodes also TensorFlow's PS push/pull.
"""

import json
import os
import subprocess
import sys

import pytest

from infra.helpers import ROOT, benchrun, validate_record
from infra.slurm import require_mpich, require_openmpi
from runners.reporting import load, why

pytestmark = pytest.mark.slow
DDP = ["--framework", "torch", "--strategy", "ddp", "--model", "alexnet", "--image-size", "64", "--batch-size", "2",
       "--num-warmup-batches", "1", "--num-batches", "2", "--num-threads", "1", "--json"]


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


COMM = ["--framework", "torch", "comm", "--model", "alexnet", "--max-bytes", "1M", "--step-factor", "4", "--iters", "3",
        "--warmup-iters", "1"]


def explained_pair(launcher: str, env: dict, tmp_path, two: list[str] = (), one: list[str] = ()) -> tuple[dict, dict]:
    """A traced 1-rank and 2-rank DDP run and a 2-rank `bench comm` under `launcher` (`two`, `one`:
    its extra arguments at each size); the report's split of T(2) - T(1) adds up and is predicted
    from the comm record's gradient buckets. Returns the 2-rank training and the comm record."""
    store, traces = tmp_path / "store.jsonl", tmp_path / "traces"
    training = [arg for arg in DDP if arg != "--json"] + ["--trace", str(traces), "--trace-steps", "2", "--output", str(store)]
    for ranks, extra, args in (("1", one, training), ("2", two, training), ("2", two, [*COMM, "--output", str(store)])):
        result = benchrun("launch", "--launcher", launcher, "-n", ranks, *extra, "--", *args, env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-4000:]
    records, comm_records = load.load([store]), load.load([store], kind="comm")
    (comm,) = comm_records
    assert comm["correct"] and comm["world"]["launcher"] == launcher and comm["world"]["processes"] == 2
    assert {row["op"] for row in comm["results"]} == {"allreduce", "pingpong", "gradients"}
    (loss,) = why.scaling_loss(records, comm_records)
    assert loss.traced and loss.predicted.how == "gradient buckets" and loss.adds_up, (loss.parts, loss.residual)
    raw = [json.loads(line) for line in store.read_text().splitlines()]  # whole records (load keeps report fields)
    two_ranks = validate_record(next(r for r in raw if r.get("kind") != "comm" and r["world"]["workers"] == 2))
    assert two_ranks["replicas"]["in_sync"] and two_ranks["throughput"]["total_images"] == 8
    assert all(s["communication_s"] > 0 for rank in two_ranks["trace"]["ranks"] for s in rank["steps"])
    assert all(r["world"]["launcher"] == launcher for r in records)
    return two_ranks, comm


def test_open_mpi_mpirun(tmp_path):
    require_openmpi()
    env = {**os.environ, "OMPI_MCA_btl_tcp_if_include": "lo"}
    record, _ = explained_pair("mpirun", env, tmp_path)
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


def test_srun_two_emulated_nodes(slurm_two_nodes, tmp_path):
    env = {**slurm_two_nodes["env"], "DLBENCH_COORDINATOR": "127.0.0.1"}
    record, comm = explained_pair("srun", env, tmp_path, two=["--launcher-arg=--nodes=2"])
    assert record["world"]["nodes"] == 2 and sorted(record["world"]["hosts"]) == ["node1", "node2"]
    assert {r["host"] for r in record["ranks"]} == {"node1", "node2"}
    assert comm["world"]["nodes"] == 2  # the ping-pong goes from one node to the other
    # TensorFlow parameter servers over both nodes: chief, 2 workers and the PS spread cyclically
    store = tmp_path / "ps.jsonl"
    result = benchrun("launch", "--launcher", "srun", "-n", "2", "--num-ps", "1", "--launcher-arg=--nodes=2", "--",
                      "--framework", "tensorflow", "comm", "--strategy", "ps", "--model", "alexnet", "--image-size", "64",
                      "--ops", "pull,ps_step", "--max-bytes", "64K", "--iters", "2", "--warmup-iters", "1",
                      "--output", str(store), env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    (ps,) = load.load([store], kind="comm")
    assert ps["correct"] and ps["world"]["nodes"] == 2 and ps["world"]["processes"] == 4
    assert {row["op"] for row in ps["results"]} == {"pull", "ps_step"} and "ps_step" in result.stdout
