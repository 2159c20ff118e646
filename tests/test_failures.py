"""Failures inside a run become records with the right status and exit code,
and leave no process behind."""

import json
import os
import resource
import signal
import subprocess
import sys
import time

import psutil
import pytest

from benchmarks.run.supervisor import classify_exit
from infra.helpers import ROOT, SMALL, bench, hanging_shutdown, last_json_line, validate_record

AS_LIMIT = 8 * 2**30  # enough to import a framework and build ResNet-50, not to train it at batch 256


def _limit_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_host_out_of_memory_is_a_recorded_result(tmp_path, framework):
    output = tmp_path / "runs.jsonl"
    result = bench(
        "--framework", framework, "--model", "resnet50", "--batch-size", "256",
        "--num-warmup-batches", "1", "--num-batches", "1", "--output", str(output), "--json",
        preexec_fn=_limit_address_space,
    )
    assert result.returncode == 3, result.stderr[-3000:]
    record = validate_record(last_json_line(result.stdout))
    assert record["status"] == "oom" and record["error"]["kind"] == "oom"
    assert record["throughput"] is None and record["repeats"] == []
    assert json.loads(output.read_text()) == record
    assert "Traceback" not in result.stderr  # one line, not a traceback flood
    assert result.stderr.strip().splitlines()[-1].startswith("total images/sec: n/a (status: oom")


def _worker_pids(parent: psutil.Process) -> list[int]:
    return [p.pid for p in parent.children(recursive=True)]


@pytest.mark.slow
def test_timeout_records_and_kills_the_whole_worker_group(tmp_path, dataset_dir):
    output = tmp_path / "runs.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "--framework", "torch", "--model", "resnet152",
         "--data-dir", str(dataset_dir), "--num-data-workers", "2", "--image-size", "64",
         "--batch-size", "2", "--num-batches", "100000", "--timeout", "25", "--output", str(output)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    parent = psutil.Process(proc.pid)
    seen = set()
    while proc.poll() is None:
        try:
            seen.update(_worker_pids(parent))
        except psutil.NoSuchProcess:
            break
        time.sleep(0.5)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 4, stderr[-3000:]
    record = validate_record(json.loads(output.read_text()))
    assert record["status"] == "timeout" and "--timeout 25" in record["error"]["message"]
    assert len(seen) >= 3, "expected the worker and its DataLoader workers"
    assert not [pid for pid in seen if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    assert "status: timeout" in stdout
    # where it waited, before it was stopped: every thread's Python stack (the timed loop's among them)
    assert "most recent call first" in stderr and "timing.py" in stderr, stderr[-3000:]


@pytest.mark.slow
def test_sigterm_records_interrupted_and_leaves_no_orphans(tmp_path):
    output = tmp_path / "runs.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "--framework", "torch", "--model", "resnet50",
         "--image-size", "64", "--batch-size", "2", "--num-batches", "100000", "--output", str(output)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while "warmup" not in (proc.stderr.readline() or "warmup") and time.monotonic() < deadline:
        pass
    workers = _worker_pids(parent)
    assert workers
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.02)  # bench is stopping its worker: a second SIGTERM (srun's after a Ctrl-C) must not cut that short
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    record = validate_record(json.loads(output.read_text()))
    assert record["status"] == "interrupted" and record["error"]["signal"] == "SIGTERM"
    time.sleep(0.5)
    assert not [pid for pid in workers if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]


@pytest.mark.slow
def test_sigusr1_shows_the_workers_stacks_and_the_run_goes_on(tmp_path):
    """How a hung run is diagnosed (perf/ps_soak.py does it to every rank): the worker's Python stacks,
    every thread, on bench's stderr; the run is not disturbed."""
    output = tmp_path / "runs.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "--framework", "torch", "--model", "alexnet", "--image-size", "64",
         "--batch-size", "2", "--num-warmup-batches", "1", "--num-batches", "6", "--display-every", "1",
         "--output", str(output)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, lines = time.monotonic() + 120, []
    while not any("(repeat 1)" in line for line in lines) and time.monotonic() < deadline:
        lines.append(proc.stderr.readline())
    for pid in _worker_pids(psutil.Process(proc.pid)):
        os.kill(pid, signal.SIGUSR1)
    rest, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert "Current thread 0x" in err and 'File "' in err and "timing.py" in err, err[-3000:]
    assert validate_record(json.loads(output.read_text()))["status"] == "ok"


def _comm_record(record: dict) -> dict:
    from benchmarks.comm import record as comm_record

    assert record["kind"] == "comm"
    return comm_record.validate(record)


@pytest.mark.slow
@pytest.mark.parametrize("args, started, validate", [
    (["--model", "resnet50", "--image-size", "64", *SMALL[:2], "--num-batches", "100000"], "warmup", validate_record),
    (["comm", "--ops", "allreduce", "--max-bytes", "4K", "--iters", "100000000"], "allreduce:", _comm_record),
], ids=["training", "comm"])
def test_a_worker_killed_by_another_process_is_a_failure_not_oom(tmp_path, args, started, validate):
    """kill -9 of the worker, the kernel's OOM-kill count unmoved: `failed` (a sweep retries it), not
    `oom` (a sweep takes that as the answer). Before, every SIGKILL was recorded as out of memory,
    and a `bench comm` worker (then bench itself) killed wrote no record at all."""
    from benchmarks.run.supervisor import oom_kills

    if oom_kills() is None:
        pytest.skip("this kernel keeps no count of OOM kills (/proc/vmstat oom_kill)")
    output = tmp_path / "runs.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "--framework", "torch", *args, "--output", str(output)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while started not in (proc.stderr.readline() or started) and time.monotonic() < deadline:
        pass
    before = oom_kills()
    worker = next(p for p in parent.children() if "benchmarks.run.worker" in " ".join(p.cmdline()))
    worker.kill()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err[-2000:]
    record = validate(json.loads(output.read_text()))
    if oom_kills() != before:
        pytest.skip("the OOM killer struck elsewhere on this host during the test: the count cannot tell")
    assert (record["status"], record["error"]["kind"], record["error"]["signal"]) == ("failed", "crash", "SIGKILL")
    assert "not by the OOM killer" in record["error"]["message"]


@pytest.mark.slow
def test_worker_dies_with_killed_supervisor():
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "--framework", "torch", "--model", "resnet50",
         "--image-size", "64", *SMALL[:2], "--num-batches", "100000"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    while not _worker_pids(parent) and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = _worker_pids(parent)
    assert workers
    proc.kill()  # SIGKILL: no handler runs; the worker's parent-death signal must take it down
    proc.wait()
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]


def test_classify_exit():
    assert classify_exit(-signal.SIGKILL, ["bench: warmup"])[0] == "oom"  # the OOM-kill count unknown
    status, error = classify_exit(-signal.SIGKILL, ["bench: warmup"], oom_kills_during=1)
    assert status == "oom" and "OOM killer (its count of OOM kills rose by 1" in error["message"]
    status, error = classify_exit(-signal.SIGKILL, ["bench: warmup"], oom_kills_during=0)
    assert (status, error["kind"], error["signal"]) == ("failed", "crash", "SIGKILL")
    assert "not by the OOM killer" in error["message"]
    status, error = classify_exit(-signal.SIGABRT, ["terminate called after throwing an instance of 'std::bad_alloc'"])
    assert status == "oom" and "bad_alloc" in error["message"] and error["signal"] == "SIGABRT"
    status, error = classify_exit(-signal.SIGSEGV, ["x"], vm_peak=9 * 2**30, as_limit=10 * 2**30)
    assert status == "oom" and "9.0 GiB of the 10.0 GiB limit" in error["message"]
    status, error = classify_exit(-signal.SIGSEGV, ["x"], vm_peak=2 * 2**30, as_limit=10 * 2**30)
    assert status == "failed" and error["message"] == "worker died with SIGSEGV: x"
    status, error = classify_exit(1, ["Traceback", "ImportError: libcuda.so.1"])
    assert (status, error["exit_code"], error["kind"]) == ("failed", 1, "crash")
    assert error["message"] == "worker exited with code 1: ImportError: libcuda.so.1"


@pytest.mark.slow
def test_a_tensorflow_run_leaves_no_autograph_files_in_the_temp_dir(tmp_path):
    """autograph writes every function it converts to the temp dir and removes them only at interpreter
    exit, which the worker skips (processes.fast_exit): on an HPC login node's shared /tmp, thousands."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = bench("--framework", "tensorflow", "--model", "alexnet", "--image-size", "64", *SMALL,
                   "--output", str(tmp_path / "runs.jsonl"), env={"TMPDIR": str(scratch)})
    assert result.returncode == 0, result.stderr[-2000:]
    assert not list(scratch.glob("__autograph_generated_file*")), sorted(p.name for p in scratch.iterdir())


@pytest.mark.slow
def test_a_shutdown_that_never_returns_keeps_the_measurement(tmp_path):
    """A shutdown that never returns (MPI_Finalize waiting for a peer): the record taken before it is still
    written, with one warning, and the run ends (the shutdown hangs for real, injected through a
    sitecustomize in the worker)."""
    (tmp_path / "sitecustomize.py").write_text(hanging_shutdown(3, 3))
    output = tmp_path / "runs.jsonl"
    started = time.monotonic()
    done = bench("--framework", "torch", "--model", "alexnet", "--image-size", "64", *SMALL, "--output", str(output),
                 env={"PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    record = validate_record(json.loads(output.read_text()))
    assert record["status"] == "ok" and record["throughput"]["images_per_sec"] > 0
    warnings = [line for line in done.stderr.splitlines() if "did not shut down within 3 s" in line]
    assert len(warnings) == 1 and "the measurement kept" in warnings[0], done.stderr[-3000:]
    assert time.monotonic() - started < 240


def test_two_threads_writing_the_result_never_leave_it_empty(tmp_path):
    """A peer's failure (rendezvous thread) and the main thread's record may write the result at once
    (seen: a `bench comm` at its --timeout gave the supervisor an empty result file): whichever lands,
    the supervisor reads a whole one."""
    import threading

    from benchmarks.run.worker import write_json

    target = tmp_path / "result.json"
    errors: list[BaseException] = []
    done = threading.Event()

    def writer(who: str) -> None:
        try:
            for _ in range(3000):
                write_json(str(target), {"record": {"who": who, "pad": "x" * 4096}})
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    def reader() -> None:
        while not done.is_set():
            if target.exists():
                try:
                    json.loads(target.read_text())
                except (ValueError, FileNotFoundError) as error:
                    errors.append(error)
                    return

    threads = [threading.Thread(target=writer, args=(who,)) for who in ("main", "peer")]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    watcher.join()
    assert not errors, errors[:3]
    assert json.loads(target.read_text())["record"]["who"] in ("main", "peer")
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no partial file left behind
