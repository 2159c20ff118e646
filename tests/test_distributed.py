"""Real multi-process runs on this CPU: 2 training ranks at a small size, through benchrun."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from infra.helpers import ROOT, benchrun, ports, rank_processes, validate_record

TINY = ["--image-size", "64", "--batch-size", "2", "--num-warmup-batches", "1", "--num-batches", "2", "--num-threads", "1"]
pytestmark = pytest.mark.slow


def launch(launcher, n, bench_args, num_ps=0):
    extra = ["--num-ps", str(num_ps)] if num_ps else []
    result = benchrun("launch", "--launcher", launcher, "-n", str(n), *extra, "--", *bench_args, *TINY, "--json")
    assert result.returncode == 0, result.stderr[-4000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, "exactly one record per run, from process 0"
    return validate_record(json.loads(lines[0]))


def assert_honest_totals(record, workers):
    assert record["status"] == "ok"
    ranks = record["ranks"]
    assert len(ranks) == workers == record["world"]["workers"]
    images = sum(r["images"] for r in ranks)
    assert images == record["throughput"]["total_images"] == workers * 2 * 2
    slowest = max(r["wall_time_s"] for r in ranks)
    assert record["throughput"]["images_per_sec"] == pytest.approx(images / slowest)
    assert record["replicas"]["in_sync"] and record["replicas"]["expected_in_sync"]
    assert record["flops"]["devices"] == workers  # MFU divides by every worker's device
    assert record["flops"]["achieved_flops_per_sec"] == pytest.approx(
        3 * record["flops"]["forward_per_image"] * record["throughput"]["images_per_sec"])
    energy = record["energy"]  # measured, or null with the reason: never 0
    assert (energy["joules"] is None) == (energy["unavailable_reason"] is not None) and energy["joules"] != 0


@pytest.mark.parametrize("launcher", ["local", "torchrun"])
def test_torch_ddp(launcher):
    record = launch(launcher, 2, ["--framework", "torch", "--strategy", "ddp", "--model", "resnet50"])
    assert_honest_totals(record, 2)
    assert record["world"]["launcher"] == {"local": "benchrun-local", "torchrun": "torchrun"}[launcher]
    assert len(set(record["replicas"]["checksums"])) == 1 and len(record["replicas"]["checksums"]) == 2


def test_torch_fsdp_trains_exactly_as_ddp():
    """Sharded (each rank keeps half of every parameter, gathered per layer) yet the same training: at 2
    ranks in float32 both sum the same two gradients, so the loss and the whole parameters (gathered
    from the shards for the checksum) end bit for bit as DDP's."""
    model = ["--framework", "torch", "--model", "alexnet"]
    ddp = launch("local", 2, [*model, "--strategy", "ddp"])
    fsdp = launch("torchrun", 2, [*model, "--strategy", "fsdp"])
    assert_honest_totals(fsdp, 2)
    assert fsdp["world"]["strategy"] == "fsdp" and fsdp["world"]["launcher"] == "torchrun"
    assert fsdp["model"]["parameters"] == ddp["model"]["parameters"] == 61_100_840  # the whole model's, not a shard's
    assert fsdp["final_loss"] == ddp["final_loss"]
    assert fsdp["replicas"]["checksums"] == ddp["replicas"]["checksums"]


def test_independent_replicas_are_reported_as_such():
    record = launch("local", 2, ["--framework", "torch", "--model", "alexnet"])
    assert record["world"]["strategy"] == "none" and record["throughput"]["total_images"] == 8
    assert record["replicas"]["expected_in_sync"] is False and record["replicas"]["in_sync"] is False


def test_tf_allreduce():
    record = launch("local", 2, ["--framework", "tf", "--strategy", "allreduce", "--model", "resnet50"])
    assert_honest_totals(record, 2)


def test_tf_parameter_server_one_ps():
    record = launch("local", 2, ["--framework", "tf", "--strategy", "ps", "--model", "resnet50"], num_ps=1)
    assert_honest_totals(record, 2)
    world = record["world"]
    assert (world["processes"], world["num_ps"]) == (4, 1)
    assert [r["rank"] for r in record["ranks"]] == [1, 2]  # the workers; the chief is process 0
    assert len(record["placement"]) == 1 and record["placement"][0]["variables"] > 100


def test_tf_parameter_server_placements_differ_and_greedy_balances():
    loads = {}
    for placement in ("round-robin", "greedy"):
        record = launch("local", 2, ["--framework", "tf", "--strategy", "ps", "--model", "resnet50",
                                     "--ps-placement", placement], num_ps=2)
        assert_honest_totals(record, 2)
        loads[placement] = [ps["bytes"] for ps in record["placement"]]
    assert loads["round-robin"] != loads["greedy"]
    assert sum(loads["round-robin"]) == sum(loads["greedy"])  # same variables, placed differently
    imbalance = {k: max(v) / max(1, min(v)) for k, v in loads.items()}
    assert imbalance["greedy"] < 1.5 < imbalance["round-robin"], loads


def endless_ddp_run(output, timeout_s: int = 120) -> subprocess.Popen:
    """A 2-rank DDP run that trains until stopped (or its timeout)."""
    return subprocess.Popen(
        [sys.executable, "-m", "runners", "launch", "--launcher", "local", "-n", "2", "--", "--framework", "torch",
         "--strategy", "ddp", "--model", "resnet50", "--image-size", "64", "--batch-size", "2",
         "--num-batches", "100000", "--num-threads", "1", "--timeout", str(timeout_s), "--output", str(output)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def fault_rank_1(tmp_path, process: int, fault, timeout_s: int = 120):
    """An endless 2-rank DDP run whose rank 1 gets `fault` (its bench: process 0, its worker: 1) in the
    training loop: (seconds from the fault to the end, exit code, stderr, record, processes left)."""
    output = tmp_path / "runs.jsonl"
    proc = endless_ddp_run(output, timeout_s)
    root = psutil.Process(proc.pid)
    victim = rank_processes(root, 1)[process]
    time.sleep(8)  # into the training loop
    everyone = [p.pid for p in root.children(recursive=True)]
    fault(victim)
    faulted = time.monotonic()
    try:
        _, stderr = proc.communicate(timeout=timeout_s + 60)
    finally:
        try:
            victim.resume()  # a stopped process must not outlive the test
        except psutil.Error:
            pass
    ended_s = time.monotonic() - faulted
    record = validate_record(json.loads(output.read_text())) if output.exists() else None
    time.sleep(1)
    alive = [pid for pid in everyone if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    return ended_s, proc.returncode, stderr, record, alive


def test_a_crashing_rank_fails_the_run_and_leaves_no_process(tmp_path):
    _, code, stderr, record, alive = fault_rank_1(tmp_path, 1, lambda victim: victim.send_signal(signal.SIGSEGV))
    assert code == 1, stderr[-3000:]
    assert record["status"] == "failed"
    assert record["error"]["message"].startswith("rank 1 on ") and "SIGSEGV" in record["error"]["message"]
    assert not alive


def test_two_runs_given_one_port_never_meet(tmp_path):
    """Two 2-rank runs started together on the same ports (issue 26: their ranks joined each other's
    rendezvous and hung, or one ended 'interrupted' by the other's launcher): one runs to its record,
    the other fails within seconds, in one line naming the port clash; nothing is left behind."""
    argv = [sys.executable, "-m", "runners", "launch", "--launcher", "local", "-n", "2", "--", "--framework", "torch",
            "--strategy", "ddp", "--model", "alexnet", *TINY, *ports(), "--json"]
    started = time.monotonic()
    runs = [subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}) for _ in range(2)]
    ended = {}
    while len(ended) < 2:
        for i, run in enumerate(runs):
            if i not in ended and run.poll() is not None:
                ended[i] = (time.monotonic() - started, *run.communicate())
        assert time.monotonic() - started < 300, "a run hung"
        time.sleep(0.1)
    codes = sorted(runs[i].returncode for i in ended)
    assert codes == [0, 1], [ended[i][2][-2000:] for i in ended]
    loser = next(i for i in ended if runs[i].returncode == 1)
    elapsed, stdout, stderr = ended[loser]
    record = validate_record(json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1]))
    message = record["error"]["message"]
    assert record["status"] == "failed" and ("held by another run" in message or "is in use on this host" in message), message
    assert elapsed < 90, f"the clash took {elapsed:.0f} s to end"
    assert "Traceback" not in stderr


def test_two_runs_given_no_ports_both_run():
    """Two 2-rank runs started together with bench's default ports (torch's process group included: `bench
    comm` all-reduces over it): each run's token places its ports, so both run to their records."""
    argv = [sys.executable, "-m", "runners", "launch", "--launcher", "local", "-n", "2", "--timeout", "240", "--",
            "--framework", "torch", "comm", "--ops", "allreduce", "--max-bytes", "4K", "--iters", "3",
            "--warmup-iters", "1", "--json"]
    runs = [subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}) for _ in range(2)]
    ended = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [stderr[-2000:] for _, stderr in ended]
    records = [json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1]) for stdout, _ in ended]
    assert all(record["status"] == "ok" and record["world"]["processes"] == 2 for record in records)
    assert records[0]["config"]["rendezvous_port"] != records[1]["config"]["rendezvous_port"]


def test_a_rank_killed_with_its_supervisor_is_named_by_process_0(tmp_path):
    """kill -9 of rank 1's bench process (its worker follows it; nobody reports): process 0's record
    names rank 1 and its host, not only gloo's "Read error", within a bound, and nothing is left."""
    ended_s, code, stderr, record, alive = fault_rank_1(tmp_path, 0, psutil.Process.kill)
    assert ended_s < 25, "process 0 took too long to end"  # 5 s for a report, then its own record
    assert code == 1, stderr[-3000:]
    assert record["status"] == "failed"
    assert record["error"]["message"].startswith("rank 1 on "), record["error"]["message"]
    assert "went away" in record["error"]["message"]
    assert not alive


def test_a_stopped_rank_is_named_when_the_run_times_out(tmp_path):
    """SIGSTOP of rank 1's worker (a hung node: alive, silent): the run ends at its --timeout (or at the
    collective's, which is the same) and process 0's record names rank 1 and its host as not heard from,
    not only "run exceeded --timeout"; nothing is left."""
    ended_s, code, stderr, record, alive = fault_rank_1(tmp_path, 1, psutil.Process.suspend, timeout_s=40)
    assert ended_s < 40 + 30, "the run outlived its --timeout and the stop grace"
    assert code != 0, stderr[-3000:]
    message = record["error"]["message"]
    assert record["status"] in ("timeout", "failed") and re.search(r"rank 1 on \S+ not heard from for \d+ s", message), message
    assert not alive
