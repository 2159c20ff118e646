"""Faults of the environment during a run, for real: the sweep store's file system fills up
mid-sweep, a private dockerd goes away mid-run, a Slurm node dies mid-run. Each ends as a
recorded result with a one-line reason and a documented exit code, leaves no process or
container behind, and the sweep goes on (or stops cleanly and resumes)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from benchmarks.core import durable
from benchmarks.core.processes import parent
from infra.helpers import ROOT, Started, last_json_line, validate_record
from infra.slurm import start_cluster, stop_cluster
from infra.sweeps import cmdline, lines, marked, tiny_plan, write_plan
from infra.tmpfs import fill, small_fs

pytestmark = pytest.mark.slow
# Long enough to be killed mid-run whatever the machine's load: the kill waits for the first
# progress line, and the run would take minutes to end by itself.
LONG = ["--framework", "torch", "--model", "alexnet", "--image-size", "64", "--batch-size", "2",
        "--num-warmup-batches", "1", "--num-batches", "5000", "--num-threads", "1", "--display-every", "1"]


def wait_for(condition, timeout: float, what: str, step: float = 0.05, seen=lambda: ""):
    """condition()'s first true value; else AssertionError naming `what` and what `seen()` says was there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"{what}: not within {timeout:g} s\n{seen()}")


def read_until(stream, text: str, timeout: float) -> str:
    """Lines of `stream` up to the first that contains `text` (AssertionError after timeout)."""
    seen, deadline = [], time.monotonic() + timeout
    for line in stream:
        seen.append(line)
        if text in line:
            return "".join(seen)
        assert time.monotonic() < deadline, f"no {text!r} within {timeout:g} s:\n{''.join(seen)[-3000:]}"
    raise AssertionError(f"ended before {text!r}:\n{''.join(seen)[-3000:]}")


def all_pids() -> list[int]:
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit()]


def environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("benchrun: error: ")]


def test_store_file_system_full_mid_sweep_stops_cleanly_and_resumes(tmp_path):
    """The disk fills while the 2nd of 3 points runs: exit 5, one line, the store holds the
    1st entry only (no torn line), the 2nd is in the pending file; after freeing space a rerun
    appends it, runs the 3rd, and every point is stored exactly once."""
    marker = uuid.uuid4().hex
    plan = write_plan(tmp_path / "plan.yaml", tiny_plan(batch_size=[1, 2, 3]))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DLBENCH_TEST_MARK": marker}
    with small_fs(tmp_path / "fs", size="2m") as fs:
        store_path = fs / "sweep.jsonl"
        pending = durable.pending_path(store_path, "sweep")
        pending.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "runners", "sweep", str(plan), "--store", str(store_path)]
        sweep = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            wait_for(lambda: store_path.exists() and store_path.read_bytes().endswith(b"\n"), 180, "first entry")
            filler = fill(fs)  # while the 2nd point runs
            out, err = sweep.communicate(timeout=300)
        finally:
            sweep.kill()
        try:
            assert sweep.returncode == 5, err
            (line,) = error_lines(err)
            assert line.startswith("benchrun: error: sweep stopped: --store ") and "No space left on device" in line, line
            assert str(pending) in line and "free space and rerun to resume" in line, line
            assert not marked(marker), "processes of the sweep left behind"
            before = lines(store_path)  # complete lines only (lines() asserts the trailing newline)
            assert [e["sweep"]["point"]["batch_size"] for e in before] == [1]
            (kept,) = lines(pending)
            assert kept["sweep"]["point"]["batch_size"] == 2 and kept["record"]["status"] == "ok", kept
            filler.unlink()  # space is back
            rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
        finally:
            pending.unlink(missing_ok=True)
        assert rerun.returncode == 0, rerun.stderr
        assert "recovered 1 entry measured while" in rerun.stderr
        assert "3 combinations: 1 to run, 2 already in" in rerun.stderr
        after = lines(store_path)
        assert after[:2] == [*before, kept]  # nothing lost: the measurement taken on a full disk is the one kept
        assert [e["sweep"]["point"]["batch_size"] for e in after] == [1, 2, 3]
        assert len({e["sweep"]["config_hash"] for e in after}) == 3  # nothing run twice
        assert all(e["record"]["status"] == "ok" and e["sweep"]["attempt"] == 1 for e in after)


def test_compare_runtimes_out_full_mid_comparison_keeps_the_run_and_the_next_run_appends_it_once(tmp_path):
    """The disk fills while round 2's run runs: exit 5, one line naming the pending file(s) and that the next run
    appends them; records.jsonl holds round 1 only. After freeing space the next run appends round 2's record (and
    its row, where that did not fit either) first, one line says so, exactly once, removes the pending files and
    adds round 3."""
    run = ["--framework", "torch", "--model", "alexnet", "--image-size", "64", "--batch-size", "2",
           "--num-warmup-batches", "1", "--num-batches", "3", "--num-threads", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with small_fs(tmp_path / "fs", size="2m") as fs:
        out = fs / "cmp"
        pending = [durable.pending_path(out / "records.jsonl", "compare-records"),
                   durable.pending_path(out / "runs.jsonl", "compare-runs")]
        for path in pending:
            path.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "runners", "compare-runtimes", "--runtimes", "local", "--out", out]
        started = Started([*argv, "--rounds", "2", "--", *run], env=env)
        try:
            wait_for(lambda: any("round 1 (1/2), 1/1 local" in line for line in list(started.out)), 300,
                     "round 1's run", seen=lambda: "".join(started.err)[-3000:])
            filler = fill(fs)  # round 2's run is starting: its record and row will find no room
            stdout, err = started.communicate(timeout=300)
            assert started.proc.returncode == 5, err[-3000:]
            (line,) = error_lines(err)
            assert line.startswith("benchrun: error: compare-runtimes stopped: could not write to ") and \
                "No space left on device" in line, line
            assert str(pending[0]) in line and "is appended by the next run on this --out" in line, line
            before = lines(out / "records.jsonl")
            assert [r["comparison"]["round"] for r in before] == [1]
            (kept,) = lines(pending[0])
            assert kept["comparison"]["round"] == 2 and kept["status"] == "ok"
            # The row is small: it may still fit in the last page runs.jsonl has; else it is kept beside the record.
            rows = lines(out / "runs.jsonl") + (lines(pending[1]) if pending[1].exists() else [])
            assert [row["round"] for row in rows] == [1, 2] and rows[1]["run_id"] == kept["run_id"]
            assert pending[1].exists() == (str(pending[1]) in line), line
            filler.unlink()  # space is back
            rerun = subprocess.run([str(a) for a in [*argv, "--rounds", "1", "--", *run]], env=env,
                                   capture_output=True, text=True, timeout=300, cwd=ROOT)
        finally:
            started.proc.kill()
            for path in pending:
                path.unlink(missing_ok=True)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        said = [text for text in rerun.stdout.splitlines() if "measured while it was not writable" in text]
        assert len(said) == 1 and f"1 to records.jsonl (from {pending[0]})" in said[0], rerun.stdout
        records = lines(out / "records.jsonl")
        assert records[:2] == [*before, kept]  # the measurement taken while --out was full is the one kept
        assert [r["run_id"] for r in records].count(kept["run_id"]) == 1
        assert [r["comparison"]["round"] for r in records] == [1, 2, 3]  # round 2 counted: the next run added 3
        assert [row["round"] for row in lines(out / "runs.jsonl")] == [1, 2, 3]
        assert not any(path.exists() for path in pending)


def test_appending_what_was_kept_is_once_even_after_a_run_killed_half_way(tmp_path):
    """durable.append_pending, the sweep's and compare-runtimes' one way back from a full disk: an entry the
    target already holds (appended by a run killed before it removed the pending file) is not appended again,
    one saved twice is appended once, and one without a key is never appended."""
    target = tmp_path / "records.jsonl"
    pending = durable.pending_path(target, "test")
    try:
        for entry in ({"id": "a"}, {"id": "b"}, {"id": "b"}, {"nothing": 1}, {"id": "c"}):
            durable.append_jsonl(pending, entry)
        durable.append_jsonl(target, {"id": "a"})  # appended, then killed before the pending file was removed
        assert durable.append_pending(target, "test", lambda e: e.get("id")) == (2, pending)
        assert lines(target) == [{"id": "a"}, {"id": "b"}, {"id": "c"}] and not pending.exists()
        assert durable.append_pending(target, "test", lambda e: e.get("id")) is None
    finally:
        pending.unlink(missing_ok=True)


def test_compare_runtimes_appends_what_was_kept_once_after_a_run_killed_before_it_removed_the_file(tmp_path, capsys):
    """compare-runtimes' keys: a record already in records.jsonl (appended by a run killed before it removed the
    pending file) is found by its run id and not appended again; its row, not yet appended, is (by comparison,
    round and position); one line says what was appended; both files are gone."""
    from runners.commands import compare_runtimes

    out = tmp_path / "cmp"
    record = {"run_id": "r2", "status": "ok", "comparison": {"id": "c", "round": 2}}
    row = {"comparison_id": "c", "round": 2, "position": 1, "runtime": "local", "run_id": "r2"}
    pending = [durable.pending_path(out / "records.jsonl", "compare-records"),
               durable.pending_path(out / "runs.jsonl", "compare-runs")]
    try:
        durable.append_jsonl(out / "records.jsonl", {"run_id": "r1"})
        durable.append_jsonl(out / "records.jsonl", record)  # appended; killed before the pending file was removed
        durable.append_jsonl(out / "runs.jsonl", {**row, "round": 1, "run_id": "r1"})
        durable.append_jsonl(pending[0], record)
        durable.append_jsonl(pending[1], row)
        compare_runtimes.recover_pending(out)
        assert [r["run_id"] for r in lines(out / "records.jsonl")] == ["r1", "r2"]
        assert [r["round"] for r in lines(out / "runs.jsonl")] == [1, 2]
        assert not any(path.exists() for path in pending)
        (said,) = capsys.readouterr().out.splitlines()
        assert f"0 to records.jsonl (from {pending[0]}); 1 to runs.jsonl (from {pending[1]})" in said, said
        compare_runtimes.recover_pending(out)  # nothing left: nothing said
        assert capsys.readouterr().out == ""
    finally:
        for path in pending:
            path.unlink(missing_ok=True)


def test_a_second_compare_runtimes_on_one_out_is_refused_in_one_line(tmp_path, capsys):
    """Two invocations on one --out would both append what was kept and number the same round: the second is
    refused in one line naming the first, before it runs or appends anything."""
    from runners import cli

    out = tmp_path / "cmp"
    with durable.sole_writer(out / "comparison.json", "--out", "compare-runtimes of local"):
        code = cli.main(["compare-runtimes", "--runtimes", "local", "--out", str(out), "--", "--framework", "torch",
                         "--model", "alexnet", "--image-size", "64", "--batch-size", "2", "--num-batches", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "is being written by compare-runtimes of local (pid" in err, err
    assert not (out / "records.jsonl").exists() and not (out / "runs.jsonl").exists()


# --- a Slurm node dies mid-run ------------------------------------------------------------------

@pytest.fixture(scope="module")
def private_slurm():
    """A two-node cluster of this module's own (own directory and ports): killing one of its
    slurmd cannot break the session's shared cluster or other tests."""
    info = start_cluster(2, directory=f"/tmp/dlb-faults-{os.getpid()}")
    yield info
    stop_cluster(info)


def node_processes(node: str, marker: str) -> list[int]:
    """The processes this test's run has on an emulated node: its tasks (SLURMD_NODENAME=node and the test's
    marker) and their slurmstepd. The marker is what makes them this test's: the other test worker's cluster
    has a node2 too, and killing its tasks and their slurmstepd (SLURMD_NODENAME alone, before) broke a run
    there: CI's podman-hpc run over two nodes lost rank 1 and then waited on its step for 900 s."""
    tasks = [pid for pid in all_pids()
             if {f"SLURMD_NODENAME={node}".encode(), f"DLBENCH_TEST_MARK={marker}".encode()} <= set(environ(pid).split(b"\0"))]
    return sorted({*tasks, *(parent(pid) for pid in tasks if "slurmstepd" in " ".join(cmdline(parent(pid) or 0)))} - {None})


def test_slurm_node_dies_mid_run(private_slurm):
    """node2 dies (its slurmd, slurmstepd and rank killed) while both ranks train: the run ends as a
    failed record naming node2 (error kind environment), exit 6, one line, no rank left."""
    marker = uuid.uuid4().hex
    env = {**private_slurm["env"], "DLBENCH_COORDINATOR": "127.0.0.1", "PYTHONPATH": str(ROOT),
           "PYTHONUNBUFFERED": "1", "DLBENCH_TEST_MARK": marker}
    argv = [sys.executable, "-m", "runners", "run", "--launcher", "srun", "-n", "2", "--launcher-arg=--nodes=2", "--",
            *LONG, "--strategy", "ddp", "--rendezvous-port", str(random.randint(20000, 40000))]
    run = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        stderr = read_until(run.stderr, "bench: step ", 240)
        slurmd = int((Path(private_slurm["dir"]) / "node2" / "slurmd.daemon.pid").read_text())
        victims = [slurmd, *node_processes("node2", marker)]
        assert len(victims) >= 3, victims  # slurmd, slurmstepd, rank 1
        for pid in victims:  # the node dies as a whole, as in a crash
            os.kill(pid, signal.SIGKILL)
        out, rest = run.communicate(timeout=240)
    finally:
        run.kill()
    stderr += rest
    assert run.returncode == 6, stderr[-3000:]
    (line,) = error_lines(stderr)
    print(line)
    assert "Slurm node node2 failed" in line and "environment" in line, line
    record = validate_record(last_json_line(out))
    assert record["status"] == "failed" and record["error"]["kind"] == "environment", record["error"]
    assert "node2" in record["error"]["message"]
    wait_for(lambda: not marked(marker), 30, "ranks left behind")


# --- the Docker daemon goes away mid-run (a private daemon: the shared one is never touched) ----

# The TensorFlow image: a third of the torch image's size to load into the private daemon.
LONG_TF = ["--framework", "tensorflow", *LONG[2:]]


def docker_env(daemon, marker: str) -> dict:
    # DLBENCH_* variables are forwarded into the container: its processes carry the marker too
    return {**os.environ, **daemon.env, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "DLBENCH_TEST_MARK": marker}


def nothing_left_once_back(daemon, marker: str) -> None:
    """The daemon comes back: it removes the run's --rm container; no process of the run is left."""
    daemon.start()
    wait_for(lambda: not marked(marker), 60, "processes of the run left after the daemon came back")
    left = daemon.docker("ps", "-aq", "--filter", "name=^/?dlbench-").stdout.split()
    assert not left, daemon.docker("ps", "-a").stdout


def test_docker_daemon_killed_mid_run(private_dockerd, dlbench_images):
    """dockerd crashes (SIGKILL) while bench trains in its container: benchrun ends with the record
    (failed, error kind environment, 'docker daemon went away'), one line, exit 6."""
    marker = uuid.uuid4().hex
    argv = [sys.executable, "-m", "runners", "run", "--runtime", "docker", "--image", dlbench_images["tensorflow"], "--",
            *LONG_TF]
    run = subprocess.Popen(argv, env=docker_env(private_dockerd, marker), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        stderr = read_until(run.stderr, "bench: step ", 300)
        private_dockerd.kill(signal.SIGKILL)
        out, rest = run.communicate(timeout=120)
    finally:
        run.kill()
    stderr += rest
    try:
        assert run.returncode == 6, stderr[-3000:]
        (line,) = error_lines(stderr)
        print(line)
        assert line.startswith("benchrun: error: the run failed: docker daemon went away ("), line
        record = validate_record(last_json_line(out))
        assert record["status"] == "failed" and record["error"]["kind"] == "environment", record["error"]
        assert record["error"]["message"].startswith("docker daemon went away")
        assert record["provenance"]["requested_runtime"] == "docker" and record["config"]["num_batches"] == 5000
    finally:
        nothing_left_once_back(private_dockerd, marker)


def test_docker_daemon_stopped_mid_sweep_the_sweep_goes_on(private_dockerd, dlbench_images, tmp_path):
    """dockerd is stopped (SIGTERM: it stops its containers) during the 1st of 2 points: the point is
    stored as failed (environment), the 2nd is tried and stored the same way while the daemon is
    away, the sweep ends with exit 1; both points stay to run, and nothing is left once it is back."""
    marker = uuid.uuid4().hex
    plan = tiny_plan(framework=["tensorflow"], batch_size=[1, 2], runtime=["docker"], image=[dlbench_images["tensorflow"]])
    plan["bench"].update(num_batches=5000, num_warmup_batches=1)
    plan = write_plan(tmp_path / "plan.yaml", plan)
    store_path = tmp_path / "sweep.jsonl"
    argv = [sys.executable, "-m", "runners", "sweep", str(plan), "--store", str(store_path)]
    env = docker_env(private_dockerd, marker)
    sweep = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        logs = tmp_path / "sweep.jsonl.logs"
        wait_for(lambda: sweep.poll() is not None or any("bench: step " in p.read_text(errors="replace")
                                                         for p in logs.glob("*.log")),
                 300, "the first point's progress", step=0.2,
                 seen=lambda: "logs:\n" + "\n".join(f"{p.name}: {p.read_text(errors='replace')[-1500:]}"
                                                     for p in logs.glob("*.log")))
        assert sweep.poll() is None, f"the sweep ended ({sweep.returncode}) before its 1st point ran: {sweep.stderr.read()}"
        private_dockerd.kill(signal.SIGTERM)
        out, err = sweep.communicate(timeout=300)
    finally:
        sweep.kill()
    try:
        assert sweep.returncode == 1, err[-3000:]
        assert "Traceback" not in err, err
        entries = lines(store_path)
        assert [e["sweep"]["point"]["batch_size"] for e in entries] == [1, 2]
        for entry in entries:
            record = validate_record(entry["record"])
            assert record["status"] == "failed" and record["error"]["kind"] == "environment", record["error"]
            assert record["error"]["message"].startswith("docker daemon went away"), record["error"]
        dry = subprocess.run([*argv, "--dry-run"], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert dry.returncode == 0 and "2 to run, 0 already in" in dry.stderr, dry.stderr
    finally:
        nothing_left_once_back(private_dockerd, marker)
