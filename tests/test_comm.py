"""bench comm: nccl-tests definitions, gradient buckets, correctness checks, the CLI, and real
gloo runs (1 rank, and 2 ranks under benchrun's local launcher)."""

import json
import subprocess
import sys
import time

import jsonschema
import numpy as np
import psutil
import pytest

from benchmarks.comm import metrics
from benchmarks.comm import record as comm_record
from benchmarks.comm.cli import default_backend
from benchmarks.runspec import RunSpec
from benchmarks.settings.options import parse_size
from infra.helpers import ROOT, bench, last_json_line, needs_module, rank_processes

COMM_SCHEMA = json.loads(comm_record.COMM_SCHEMA_FILE.read_text())
SMALL_COMM = ["--max-bytes", "4K", "--step-factor", "4", "--iters", "3", "--warmup-iters", "1"]


def test_busbw_follows_nccl_tests():
    assert metrics.bus_factor("allreduce", 1) == 0
    assert metrics.bus_factor("allreduce", 2) == 1
    assert metrics.bus_factor("allreduce", 8) == pytest.approx(1.75)
    assert metrics.bus_factor("pingpong", 8) == 1
    row = metrics.timing_row("allreduce", 10**9, [[0.5, 1.5], [1.0, 1.0]], 4)  # per-rank means 1.0, 1.0
    assert row["time_s"] == pytest.approx(1.0) and row["algbw_gbps"] == pytest.approx(1.0)
    assert row["busbw_gbps"] == pytest.approx(1.5) and row["time_stats_s"]["n"] == 4


def test_pingpong_is_half_the_round_trip():
    row = metrics.pingpong_row(2 * 10**9, [4.0, 4.0])
    assert row["time_s"] == 2.0 and row["latency_us"] == 2e6 and row["algbw_gbps"] == pytest.approx(1.0)


def test_sizes_and_units():
    assert metrics.message_sizes(4, 64, 2) == [4, 8, 16, 32, 64]
    assert metrics.message_sizes(4, 256 * 2**20, 4)[-1] == 256 * 2**20
    assert metrics.message_sizes(1, 8, 2) == [4, 8]
    assert parse_size("256MiB") == 256 * 2**20 and parse_size("64K") == 65536
    with pytest.raises(ValueError):
        parse_size("lots")


def test_check_catches_wrong_sums():
    expected = metrics.expected_sum(3, 20)
    good = sum(metrics.pattern(r, 20).astype(np.float64) for r in range(3))
    assert metrics.wrong_elements(good, expected) == 0
    shifted = np.roll(good, 1)
    assert metrics.wrong_elements(shifted, expected) > 0
    assert metrics.wrong_elements(good[:20] * 2, expected) == 20


def test_ddp_buckets_match_torch():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    sizes = [4 * 10**5, 3 * 10**5, 5 * 10**5, 9 * 10**6, 2 * 10**7, 4, 8 * 10**6, 3 * 10**7]
    ours = metrics.buckets_by_size(sizes, metrics.DDP_FIRST_BUCKET_BYTES, metrics.DDP_BUCKET_BYTES)
    assert sum(ours) == sum(sizes)
    tensors = [torch.empty(s // 4) for s in sizes]
    indices, _ = dist._compute_bucket_assignment_by_size(
        tensors, [dist._DEFAULT_FIRST_BUCKET_BYTES, metrics.DDP_BUCKET_BYTES], [False] * len(tensors))
    theirs = [sum(tensors[i].numel() * 4 for i in bucket) for bucket in indices]
    assert [b // 4 for b in ours] == [b // 4 for b in theirs]


def test_default_backend_is_what_training_uses():
    assert default_backend("torch", "none", "auto", lambda: True) == "nccl"
    assert default_backend("torch", "none", "cpu", lambda: True) == "gloo"
    assert default_backend("torch", "none", "auto", lambda: False) == "gloo"
    assert default_backend("tensorflow", "none", "auto", lambda: True) == "collective"
    assert default_backend("tensorflow", "ps", "auto", lambda: True) == "ps"


def test_nccl_device_logic():
    pytest.importorskip("torch")
    from benchmarks.comm.torch_dist import device_for
    from benchmarks.core.errors import UsageError

    assert device_for("nccl", 3, 2) == "cuda:1"
    assert device_for("gloo", 3, 2) == "cpu"
    with pytest.raises(UsageError, match="needs a CUDA device"):
        device_for("nccl", 0, 0)


def test_committed_comm_schema_matches_models():
    assert COMM_SCHEMA == comm_record.json_schema(), \
        "regenerate: python -m benchmarks.comm.record > benchmarks/schema/comm-1.json"


def test_every_comm_field_is_documented():
    docs = (ROOT / "docs" / "comm.md").read_text()
    names = set(COMM_SCHEMA["properties"])
    for name, definition in COMM_SCHEMA["$defs"].items():
        if name in ("CommConfig", "CommRow", "Gradients", "CommError"):
            names.update(definition.get("properties", {}))
    missing = sorted(n for n in names if f"`{n}`" not in docs)
    assert not missing, f"fields without documentation in docs/comm.md: {missing}"


@pytest.mark.parametrize("args, message", [
    (["--framework", "torch", "comm", "--step-factor", "3"], "--step-factor must be 2 or 4"),
    (["--framework", "torch", "comm", "--backend", "collective"], "not a torch backend"),
    (["--framework", "torch", "comm", "--ops", "allreduce,push"], "unknown push"),
    (["--framework", "torch", "comm", "--max-bytes", "huge"], "not a size"),
    (["--framework", "torch", "comm", "--min-bytes", "1M", "--max-bytes", "4K"], "above --max-bytes"),
    (["--framework", "torch", "comm", "--strategy", "ps", "--num-ps", "1"], "tensorflow only"),
    (["--framework", "tensorflow", "comm", "--strategy", "ps"], "needs --num-ps 1 or more"),
    (["--framework", "tensorflow", "comm", "--backend", "ps"], "goes with its own strategy only"),
    (["--framework", "tensorflow", "comm", "--strategy", "ps", "--num-ps", "1", "--ops", "allreduce"], "unknown allreduce"),
    (["--framework", "tensorflow", "comm", "--strategy", "ps", "--num-ps", "1"], "needs at least 3 processes"),
    (["--framework", "tensorflow", "comm", "--model", "alexnet", "--image-size", "8"], "too small for alexnet"),
])
def test_bad_input_is_one_line(args, message):
    result = bench(*args, timeout=60)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_one_rank_gloo(tmp_path):
    pytest.importorskip("torch")
    store = tmp_path / "store.jsonl"
    result = bench("--framework", "torch", "comm", *SMALL_COMM, "--ops", "allreduce", "--output", str(store), "--json",
                   timeout=120)
    assert result.returncode == 0, result.stderr
    record = last_json_line(result.stdout)
    jsonschema.validate(record, COMM_SCHEMA)
    assert record["kind"] == "comm" and record["correct"] and record["config"]["backend"] == "gloo"
    assert [r["bytes"] for r in record["results"]] == [4, 16, 64, 256, 1024, 4096]
    assert all(r["busbw_gbps"] == 0 and r["iterations"] == 3 for r in record["results"])  # n = 1: 2(n-1)/n = 0
    assert "avg allreduce busbw" in result.stderr
    assert json.loads(store.read_text())["run_id"] == record["run_id"]


@pytest.mark.parametrize("size, total_bytes", [(None, 2200096), ("56", 7016992)])
def test_one_rank_gradients_of_smallcnn_follow_the_image_size(size, total_bytes):
    """Every --model has gradients to exchange, smallcnn too (not a torchvision model): its classifier
    follows the image size (default 28 px), as in the network training builds."""
    pytest.importorskip("torch")
    result = bench("--framework", "torch", "comm", "--model", "smallcnn", *(["--image-size", size] if size else []),
                   "--ops", "gradients", "--iters", "2", "--warmup-iters", "1", "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    record = last_json_line(result.stdout)
    assert record["status"] == "ok" and record["correct"], record.get("error")
    assert record["gradients"]["model"] == "smallcnn" and record["gradients"]["total_bytes"] == total_bytes


def test_two_ranks_local_launcher_prints_busbw_table(tmp_path):
    """The issue's done-when: benchrun launch --launcher local -n 2 -- --framework torch comm."""
    pytest.importorskip("torch")
    store = tmp_path / "store.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "runners", "launch", "--launcher", "local", "-n", "2", "--timeout", "240", "--",
         "--framework", "torch", "comm", *SMALL_COMM, "--output", str(store)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "busbw" in result.stdout and "gradients" in result.stdout
    records = [json.loads(line) for line in store.read_text().splitlines()]
    assert len(records) == 1
    record = records[0]
    jsonschema.validate(record, COMM_SCHEMA)
    assert record["world"]["processes"] == 2 and record["world"]["launcher"] == "benchrun-local"
    assert record["correct"] and record["status"] == "ok"
    ops = {r["op"] for r in record["results"]}
    assert ops == {"allreduce", "pingpong", "gradients"}
    for row in record["results"]:
        assert row["wrong"] == 0 and row["time_s"] > 0
        if row["op"] != "pingpong":
            assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"])  # n = 2: factor 1
    gradients = record["gradients"]
    assert gradients["model"] == "resnet50" and gradients["total_bytes"] == 4 * 25557032


def test_reports_keep_comm_and_training_records_apart(tmp_path):
    from runners.reporting import load

    store = tmp_path / "mixed.jsonl"
    minimal = {"config": {"framework": "torch", "model": "resnet50"}, "status": "ok"}
    store.write_text(json.dumps({**minimal, "kind": "comm", "run_id": "c"}) + "\n"
                     + json.dumps({**minimal, "run_id": "t"}) + "\n")
    assert [r["run_id"] for r in load.load([store])] == ["t"]
    assert [r["run_id"] for r in load.load([store], kind="comm")] == ["c"]


def test_the_host_writes_a_comm_record_for_a_run_that_lost_process_0():
    """benchrun's record of a `bench comm` run whose process 0 was killed (runners.faults) is a comm
    record with the run's world; before, there was none ("no record could be made")."""
    from benchmarks.distributed.cluster import run_ports
    from benchmarks.results.record import utc_now
    from runners import faults
    from runners.dispatch import RunRequest

    asked = RunSpec.from_argv(["--framework", "torch", "comm", "--ops", "allreduce", "--max-bytes", "4K"])
    request = RunRequest(asked, launcher="local", num_workers=2)
    reason = "process 0 was killed by SIGKILL before it wrote a record (on vm)"
    record = faults.host_record(request, "benchrun-local", reason, 6, utc_now(), 1.5, ["benchrun", "run"], "run-a")
    jsonschema.validate(record, COMM_SCHEMA)
    assert record["config"]["rendezvous_port"] == run_ports({}, "run-a")["rendezvous_port"]  # where its ranks met
    assert (record["kind"], record["status"], record["error"]["kind"]) == ("comm", "failed", "environment")
    assert record["error"]["message"] == reason and record["config"]["backend"] == "gloo"
    assert (record["world"]["processes"], record["world"]["launcher"]) == (2, "benchrun-local")
    assert faults.blame(record, "node2 failed", 6)["error"]["message"] == "node2 failed"


def run_launch(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "runners", "launch", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_two_ranks_tensorflow_collective(tmp_path):
    needs_module("tensorflow")
    store = tmp_path / "store.jsonl"
    result = run_launch("--launcher", "local", "-n", "2", "--timeout", "240", "--", "--framework", "tensorflow", "comm",
                        *SMALL_COMM, "--ops", "allreduce,pingpong", "--output", str(store))
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(store.read_text())
    jsonschema.validate(record, COMM_SCHEMA)
    assert record["config"]["backend"] == "collective" and record["correct"]
    assert {r["op"] for r in record["results"]} == {"allreduce"}  # TF has no point-to-point op: said, not faked
    assert "no point-to-point" in result.stderr


@pytest.mark.slow
def test_a_rank_killed_mid_measurement_is_named_by_process_0(tmp_path):
    """kill -9 of rank 1 (bench and its worker) in the timed loops: process 0's record names rank 1 and
    its host (before: only gloo's "Read error"), within perf/fault_matrix.md's bound, nothing left."""
    pytest.importorskip("torch")
    store = tmp_path / "store.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "runners", "launch", "--launcher", "local", "-n", "2", "--timeout", "120", "--",
         "--framework", "torch", "comm", "--ops", "allreduce", "--max-bytes", "4K", "--iters", "100000000",
         "--output", str(store)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root = psutil.Process(proc.pid)
    victim, _ = rank_processes(root, 1)
    deadline = time.monotonic() + 120
    while "allreduce:" not in (proc.stderr.readline() or "allreduce:") and time.monotonic() < deadline:
        pass
    everyone = [p.pid for p in root.children(recursive=True)]
    victim.kill()
    killed = time.monotonic()
    _, stderr = proc.communicate(timeout=90)
    assert time.monotonic() - killed < 30, "process 0 took too long to end"
    assert proc.returncode == 1, stderr[-3000:]
    record = json.loads(store.read_text())
    jsonschema.validate(record, COMM_SCHEMA)
    assert record["status"] == "failed" and record["world"]["processes"] == 2
    assert record["error"]["message"].startswith("rank 1 on ") and "went away" in record["error"]["message"]
    time.sleep(1)
    assert not [pid for pid in everyone if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
