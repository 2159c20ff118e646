"""Every signal that ends a process by default and that a shell, a terminal or a batch system sends ends a run as
a record (issue 48): the policy (benchmarks/core/processes.py), the timed loop's step boundary, real `bench` runs per
signal, benchrun's run, sweep and compare-runtimes, and Slurm's pre-timeout warning for real (docs/signals.md)."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from benchmarks.core import processes
from benchmarks.core.errors import EXIT_INTERRUPTED, Stopped
from benchmarks.measure import timing
from benchmarks.run.supervisor import classify_exit
from infra.helpers import ROOT, Started, needs_module, rank_processes, validate_record
from infra.slurm import require_mpich, require_openmpi, slurm_single, slurm_two_nodes  # noqa: F401  (fixtures, used by name)
from infra.sweeps import lines, marked, tiny_plan, write_plan

RUN = ["--framework", "torch", "--model", "alexnet", "--image-size", "64", "--batch-size", "2",
       "--num-warmup-batches", "1", "--num-threads", "1", "--display-every", "1"]
LONG = ["--num-batches", "100000"]  # ended only by the signal


# -- the policy, in process ----------------------------------------------------------------------------

def test_every_ending_signal_a_shell_terminal_or_batch_system_sends_has_a_meaning():
    sent = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGXCPU,  # shells, terminals, limits
            signal.SIGUSR1, signal.SIGUSR2}  # Slurm's --signal
    assert set(processes.ENDING_SIGNALS) == sent
    assert not set(processes.STOP_SIGNALS) & set(processes.BOUNDARY_SIGNALS)
    # Slurm's warning: at a step boundary for one process; now for several, which could not agree on one step
    assert processes.at_boundary(signal.SIGUSR1, 1) and not processes.at_boundary(signal.SIGUSR1, 2)
    assert not processes.at_boundary(signal.SIGHUP, 1)


def test_only_signals_nobody_handles_are_taken_and_ctrl_c_always(monkeypatch):
    monkeypatch.setattr(signal, "getsignal", lambda s: (lambda *a: None) if s == signal.SIGHUP else signal.SIG_DFL)
    taken = processes.unhandled()
    assert signal.SIGINT in taken and signal.SIGTERM in taken and signal.SIGHUP not in taken


@pytest.fixture
def boundary(monkeypatch):
    monkeypatch.setattr(timing, "boundary", timing.StepBoundary())
    monkeypatch.setattr(timing, "clock", iter(float(t) for t in range(1000)).__next__)
    return timing.boundary


def test_the_warning_ends_the_loop_at_the_next_step_boundary_with_every_step_it_timed(boundary):
    def step(batch):
        if batch == 2:
            boundary.request("SIGUSR1")  # arrives during the third step: that step is finished and timed
        return batch

    loop = timing.run_steps(iter(range(100)), step, lambda: None, num_steps=50, images_per_step=4)
    assert len(loop.step_times_s) == 3 and loop.images == 12
    assert loop.images_per_sec == 12 / sum(loop.step_times_s)  # over the steps actually timed
    again = timing.run_steps(iter(range(100)), step, lambda: None, num_steps=50, images_per_step=4)
    assert again.step_times_s == [] and again.images == 0  # a further repeat times nothing


def test_a_stop_now_keeps_the_steps_before_the_one_it_cut_short(boundary):
    def step(batch):
        if batch == 3:
            raise Stopped.by(signal.SIGHUP)  # what the worker's handler raises, mid-step
        return batch

    with pytest.raises(Stopped) as stopped:
        timing.run_steps(iter(range(100)), step, lambda: None, num_steps=50, images_per_step=4)
    assert stopped.value.signal == "SIGHUP" and stopped.value.status == "interrupted"
    assert len(stopped.value.loop.step_times_s) == 3 and stopped.value.loop.images == 12


def test_a_worker_ended_by_someone_elses_signal_is_interrupted_not_failed():
    for signum in (signal.SIGHUP, signal.SIGXCPU, signal.SIGUSR2):
        status, error = classify_exit(-signum, ["step 3/10"])
        assert (status, error["kind"], error["signal"]) == ("interrupted", "interrupted", signum.name)
    assert classify_exit(-signal.SIGSEGV, [])[0] == "failed"


# -- real bench runs, one per signal ---------------------------------------------------------------------

def _bench(tmp_path, *extra, **popen) -> tuple[Started, object]:
    out = tmp_path / "runs.jsonl"
    return Started([sys.executable, "-m", "benchmarks", *RUN, *extra, "--output", out],
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, **popen), out


def _ended(started: Started, out, signame: str) -> dict:
    """The run's record once it ended: status 'interrupted' naming the signal, exit 130, one line, nothing left."""
    workers = [p.pid for p in psutil.Process(started.proc.pid).children(recursive=True)]
    _, err = started.communicate(timeout=120)
    assert started.proc.returncode == EXIT_INTERRUPTED, err[-3000:]
    assert "Traceback" not in err
    record = validate_record(json.loads(out.read_text()))
    assert record["status"] == "interrupted" and record["error"]["signal"] == signame, record["error"]
    deadline = time.monotonic() + 10
    while [pid for pid in workers if processes.alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if processes.alive(pid)]
    return record


def _steps_kept(record: dict, at_least: int) -> int:
    steps = record["throughput"]["total_images"] // 2
    assert steps >= at_least and record["repeats"][0]["images"] == 2 * steps
    assert record["throughput"]["images_per_sec"] == pytest.approx(
        record["throughput"]["total_images"] / record["throughput"]["total_wall_time_s"])
    return steps


@pytest.mark.slow
@pytest.mark.parametrize("signum", processes.STOP_SIGNALS, ids=lambda s: s.name)
def test_a_stop_signal_records_interrupted_with_the_steps_already_timed(tmp_path, signum):
    """Ctrl-C, SIGTERM, a hang-up (an SSH session dropped), a quit, a CPU-time limit: stopped now, the steps
    timed kept."""
    started, out = _bench(tmp_path, *LONG)
    started.wait_for("step 3/100000 (repeat 1)", 180)
    started.proc.send_signal(signum)
    _steps_kept(_ended(started, out, signum.name), 3)


@pytest.mark.slow
def test_a_cpu_time_limit_reached_by_the_worker_itself_is_recorded(tmp_path):
    """ulimit -t: the kernel sends SIGXCPU to the process that used the time, bench's worker, not bench."""
    def limit_cpu():
        resource.setrlimit(resource.RLIMIT_CPU, (25, 120))

    started, out = _bench(tmp_path, *LONG, preexec_fn=limit_cpu)
    record = _ended(started, out, "SIGXCPU")
    assert record["error"]["message"] == "stopped by SIGXCPU"
    _steps_kept(record, 1)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGUSR2], ids=lambda s: s.name)
def test_slurms_warning_stops_at_the_next_step_boundary_and_keeps_what_was_measured(tmp_path, signum):
    started, out = _bench(tmp_path, *LONG)
    started.wait_for("step 3/100000 (repeat 1)", 180)
    started.proc.send_signal(signum)
    record = _ended(started, out, signum.name)
    steps = _steps_kept(record, 3)
    assert f"stopped at a step boundary by {signum.name}" in record["error"]["message"]
    assert f"{steps} of 100000 timed steps measured" in record["error"]["message"]
    assert len(record["ranks"]) == 1 and record["final_loss"] is not None  # assembled like an ok run's record


@pytest.mark.slow
def test_slurms_warning_during_warmup_measures_nothing(tmp_path):
    started, out = _bench(tmp_path, "--num-warmup-batches", "100000", "--num-batches", "5")
    started.wait_for("step 2/100000 (warmup)", 180)
    started.proc.send_signal(signal.SIGUSR1)
    record = _ended(started, out, "SIGUSR1")
    assert record["throughput"] is None and record["repeats"] == []
    assert "0 of 5 timed steps measured" in record["error"]["message"]


@pytest.mark.slow
@pytest.mark.parametrize("framework", [
    ["--strategy", "ddp"],
    # TensorFlow's coordination service takes SIGTERM below Python (processes.retake_stop_signals)
    ["--framework", "tf", "--strategy", "allreduce", "--model", "resnet50"],
], ids=["torch-ddp", "tf-allreduce"])
def test_a_stopped_run_of_two_ranks_keeps_the_steps_every_rank_timed(tmp_path, framework):
    """A 2-rank run stopped by SIGTERM in the timed loop (benchrun stops every rank at once, as torchrun, srun and
    mpirun do): each rank's worker writes the steps it timed, process 0's record totals them over both ranks (over the
    steps both completed), exit 130, nothing left."""
    if "tf" in framework:
        needs_module("tensorflow")
    started = Started([sys.executable, "-m", "runners", "run", "--runtime", "local", "--launcher", "local", "-n", "2",
                       "--", *RUN, *framework, *LONG], env={**os.environ, "PYTHONPATH": str(ROOT)})
    started.wait_for("step 3/100000 (repeat 1)", 300)  # process 0's third timed step: DDP ranks step together
    descendants = processes.descendants(started.proc.pid)
    started.proc.send_signal(signal.SIGTERM)
    out, err = started.communicate(timeout=120)
    assert started.proc.returncode == EXIT_INTERRUPTED and "Traceback" not in err, err[-3000:]
    record = validate_record(json.loads([line for line in out.splitlines() if line.startswith("{")][-1]))
    assert record["status"] == "interrupted" and record["error"]["signal"] == "SIGTERM", record["error"]
    message = record["error"]["message"]
    counts = {int(rank): int(n) for rank, n in re.findall(r"rank (\d+) (\d+)", message.split("steps timed: ", 1)[1])}
    assert set(counts) == {0, 1} and min(counts.values()) >= 2, message
    every = min(counts.values())
    assert f"totals over the {every} steps every rank completed" in message, message
    assert [row["rank"] for row in record["ranks"]] == [0, 1]
    assert all(row["images"] == 2 * every for row in record["ranks"])  # --batch-size 2, cut to the common steps
    assert record["throughput"]["total_images"] == 2 * 2 * every and record["throughput"]["images_per_sec"] > 0
    assert record["throughput"]["images_per_sec"] == pytest.approx(
        record["throughput"]["total_images"] / record["throughput"]["total_wall_time_s"])
    deadline = time.monotonic() + 10
    while [pid for pid in descendants if processes.alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in descendants if processes.alive(pid)]


@pytest.mark.slow
def test_a_stopped_parameter_server_run_keeps_the_steps_its_chief_timed():
    """--strategy ps (a chief, two workers, one PS) stopped by SIGTERM in the timed loop: the chief, which times every
    worker's steps itself and waits in no collective, unwinds as a run of one does; its record keeps each worker's
    steps that had reached it (a row per worker), exit 130, no ERROR of TensorFlow's for the workers the same stop
    took, nothing left. Before, it kept nothing. The progress line is the chief's too: steps per worker."""
    needs_module("tensorflow")
    started = Started([sys.executable, "-m", "runners", "run", "--runtime", "local", "--launcher", "local", "-n", "2",
                       "--num-ps", "1", "--", *RUN, "--framework", "tensorflow", "--strategy", "ps", *LONG],
                      env={**os.environ, "PYTHONPATH": str(ROOT)})
    started.wait_for("step 2/100000 (repeat 1)", 300)  # the first four steps queued (two per worker) reached the chief
    descendants = processes.descendants(started.proc.pid)
    started.proc.send_signal(signal.SIGTERM)
    out, err = started.communicate(timeout=120)
    assert started.proc.returncode == EXIT_INTERRUPTED and "Traceback" not in err, err[-3000:]
    assert "ERROR:tensorflow" not in err, err[-3000:]
    record = validate_record(json.loads([line for line in out.splitlines() if line.startswith("{")][-1]))
    assert record["status"] == "interrupted" and record["error"] == {
        "kind": "interrupted", "message": "stopped by SIGTERM", "signal": "SIGTERM", "exit_code": None}, record["error"]
    assert [(row["rank"], row["role"]) for row in record["ranks"]] == [(1, "worker"), (2, "worker")]
    throughput = record["throughput"]
    assert throughput["total_images"] == sum(row["images"] for row in record["ranks"]) >= 2 * 2 * 2  # batch 2
    assert throughput["images_per_sec"] == pytest.approx(throughput["total_images"] / throughput["total_wall_time_s"])
    _wait_for(lambda: not [pid for pid in descendants if processes.alive(pid)], 10, "a process outlived the run")


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["mpirun", "mpich", "srun"])
def test_a_stopped_run_under_an_mpi_launcher_or_srun_keeps_the_steps_every_rank_timed(launcher, request):
    """benchrun's launcher stopped by SIGTERM in the timed loop: the launcher passes the stop to both ranks (Open MPI's
    mpirun only after its own odls_base_sigkill_timeout, which also bounds the ranks' time to end: dlbench sets it), process
    0's record totals their steps, exit 130, no rank left."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if launcher == "mpirun":
        require_openmpi()
        env["OMPI_MCA_btl_tcp_if_include"] = "lo"
    elif launcher == "mpich":
        require_mpich()
        env["UCX_NET_DEVICES"] = "lo"
    else:  # emulated Slurm nodes have names that do not resolve: ranks meet on loopback
        env = {**request.getfixturevalue("slurm_single")["env"], "PYTHONPATH": str(ROOT), "DLBENCH_COORDINATOR": "127.0.0.1"}
    started = Started([sys.executable, "-m", "runners", "run", "--runtime", "local", "--launcher", launcher, "-n", "2",
                       "--", "--strategy", "ddp", *RUN, *LONG], env=env)
    started.wait_for("step 3/100000 (repeat 1)", 300)
    descendants = processes.descendants(started.proc.pid)
    started.proc.send_signal(signal.SIGTERM)
    out, err = started.communicate(timeout=120)
    assert started.proc.returncode == EXIT_INTERRUPTED and "Traceback" not in err, err[-3000:]
    assert [line for line in out.splitlines() if line.startswith("{")], err[-3000:]  # no record: killed meanwhile
    record = validate_record(json.loads([line for line in out.splitlines() if line.startswith("{")][-1]))
    assert record["status"] == "interrupted" and record["world"]["launcher"] == launcher, record["error"]
    assert "every rank completed" in record["error"]["message"], record["error"]["message"]
    assert [row["rank"] for row in record["ranks"]] == [0, 1] and record["throughput"]["total_images"] > 0
    _wait_for(lambda: not [pid for pid in descendants if processes.alive(pid)], 10, "a rank outlived the run")


TTA = ["--framework", "torch", "--model", "smallcnn", "--batch-size", "32", "--base-lr", "0.02", "--eval-every", "512",
       "--max-epochs", "1", "--val-images", "500", "--num-threads", "1", "--target-accuracy", "0.99"]  # not reached


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2, "ps"])
def test_a_stopped_time_to_accuracy_run_keeps_its_curve_and_its_training_steps(fashion_mnist, ranks):
    """bench --target-accuracy stopped by SIGTERM after its second evaluation, alone, as two DDP ranks (benchrun
    stops both) and as TensorFlow's chief with two workers and a PS: outcome `stopped`, the curve so far, the finished
    blocks' training rate (over both ranks; over both workers, which the chief timed), exit 130. Each kept nothing
    before."""
    argv = ([sys.executable, "-m", "benchmarks", *TTA, "--json"] if ranks == 1 else
            [sys.executable, "-m", "runners", "run", "--runtime", "local", "--launcher", "local", "-n", "2", "--",
             "--strategy", "ddp", *TTA] if ranks == 2 else
            [sys.executable, "-m", "runners", "run", "--runtime", "local", "--launcher", "local", "-n", "2", "--num-ps",
             "1", "--", *TTA, "--framework", "tensorflow", "--strategy", "ps"])
    started = Started(argv, env={**os.environ, "PYTHONPATH": str(ROOT)})
    started.wait_for(f"{512 * 2} samples (epoch", 300)  # the second evaluation's line
    started.proc.send_signal(signal.SIGTERM)
    out, err = started.communicate(timeout=120)
    assert started.proc.returncode == EXIT_INTERRUPTED and "Traceback" not in err, err[-3000:]
    record = validate_record(json.loads([line for line in out.splitlines() if line.startswith("{")][-1]))
    assert record["status"] == "interrupted" and record["error"]["signal"] == "SIGTERM", record["error"]
    section = record["accuracy"]
    assert section["outcome"] == "stopped" and len(section["curve"]) >= 2 and section["samples_to_target"] is None
    assert section["best_accuracy"] == max(point["val_accuracy"] for point in section["curve"])
    assert section["train_images_per_sec"] == record["throughput"]["images_per_sec"] > 0
    assert record["throughput"]["total_images"] >= section["curve"][1]["samples"]  # the blocks before the 2nd evaluation
    assert [row["rank"] for row in record["ranks"] or [{"rank": 0}]] == ([1, 2] if ranks == "ps" else list(range(ranks)))


@pytest.mark.slow
def test_a_rank_whose_steps_never_come_is_named_and_no_total_is_kept(tmp_path):
    """Rank 1's worker SIGSTOPped in the timed loop (it cannot write its steps when the stop comes; its supervisor
    kills it 10 s later), then the run stopped: process 0's worker, blocked in the collective rank 1 never joins,
    still writes its own steps; the record names rank 1 as missing and keeps no total rather than half of one."""
    started = Started([sys.executable, "-m", "runners", "run", "--runtime", "local", "--launcher", "local", "-n", "2",
                       "--", "--strategy", "ddp", *RUN, *LONG], env={**os.environ, "PYTHONPATH": str(ROOT)})
    started.wait_for("step 3/100000 (repeat 1)", 300)
    _, worker = rank_processes(psutil.Process(started.proc.pid), 1)
    worker.suspend()
    started.proc.send_signal(signal.SIGTERM)
    out, err = started.communicate(timeout=120)
    assert started.proc.returncode == EXIT_INTERRUPTED and "Traceback" not in err, err[-3000:]
    record = validate_record(json.loads([line for line in out.splitlines() if line.startswith("{")][-1]))
    message = record["error"]["message"]
    assert record["status"] == "interrupted" and message.startswith("stopped by SIGTERM; the steps of rank 1 are missing")
    timed = re.search(r"no totals kept \(steps timed: rank 0 (\d+)\)$", message)
    assert timed and int(timed.group(1)) >= 3, message
    assert record["throughput"] is None and record["repeats"] == [] and record["ranks"] == []
    deadline = time.monotonic() + 10
    while processes.alive(worker.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes.alive(worker.pid), "the stopped worker outlived the run"


def test_ranks_steps_are_totalled_over_the_steps_every_rank_completed_or_not_at_all():
    """rank_steps.kept: ranks cut at different steps count the steps all completed; a rank missing keeps no total."""
    from benchmarks.run import rank_steps

    def rank(host: str, steps: list[list[float]]) -> dict:
        return {"host": host, "role": {"kind": "worker", "index": 0}, "signal": "SIGTERM",
                "loops": [{"images": 2 * len(times), "wall_time_s": sum(times), "step_times_s": times,
                           "input_wait_s": [0.0] * len(times), "energy": None, "device_state": None} for times in steps]}

    found = {0: rank("a", [[1.0] * 5, [1.0] * 3]), 1: rank("b", [[2.0] * 5, [2.0] * 2])}
    sections, said = rank_steps.kept(found, 2, batch_size=2)
    assert said == "; steps timed: rank 0 8, rank 1 7; totals over the 7 steps every rank completed"
    assert [r["images"] for r in sections["repeats"]] == [20, 8] and sections["throughput"]["total_images"] == 28
    assert [r["wall_time_s"] for r in sections["repeats"]] == [10.0, 4.0]  # the slowest rank's, over the common steps
    assert [(row["host"], row["images"]) for row in sections["ranks"]] == [("a", 14), ("b", 14)]
    assert rank_steps.kept({0: found[0]}, 2, 2) == (
        {}, "; the steps of rank 1 are missing (stopped before it could hand them over): no totals kept (steps "
            "timed: rank 0 8)")
    assert rank_steps.kept({0: rank("a", [[1.0]]), 1: rank("b", [[]])}, 2, 2)[0] == {}
    # a time-to-accuracy run's: process 0's curve so far, with the run's training rate over ranks
    given = {**found[0], "sections": {"accuracy": {"outcome": "stopped", "train_images_per_sec": 0.0}}}
    sections, _ = rank_steps.kept({0: given, 1: found[1]}, 2, batch_size=2)
    assert sections["accuracy"] == {"outcome": "stopped", "train_images_per_sec": 28 / 14.0}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_stopped_ranks_steps_reach_process_0_over_the_rendezvous_and_another_runs_do_not(tmp_path):
    """Rendezvous.hand_over on a connection of its own while the rank's gather connection is open; rank_steps.receive
    writes what was handed over into process 0's directory, whole; a rank of another run that reached the port is
    ignored, not counted."""
    from benchmarks.distributed.rendezvous import Rendezvous
    from benchmarks.run import rank_steps

    port = free_port()
    zero = Rendezvous(0, 2, "127.0.0.1", port, 10, run_token="run-a")
    try:
        one = Rendezvous(1, 2, "127.0.0.1", port, 10, run_token="run-a")
        steps = rank_steps.payload(1, "node2", {"kind": "worker", "index": 1}, {"loops": [{"step_times_s": [0.5]}]}, "SIGTERM")
        assert one.hand_over(steps)
        with socket.create_connection(("127.0.0.1", port)) as stranger:  # another run's rank: process 0 hangs up
            stranger.sendall(json.dumps({"op": "steps", "rank": 2, "value": steps, "run": "run-b"}).encode() + b"\n")
            assert stranger.makefile().read() == ""  # closed once the message was read: it has been dealt with
        directory = tmp_path / "steps"
        rank_steps.keep(rank_steps.rank_file(directory, 0), {**steps, "rank": 0, "host": "node1"})
        started = time.monotonic()
        rank_steps.receive(zero, directory, 2, wait_s=10)
        assert time.monotonic() - started < 5  # it was there: no waiting out the 10 s
        assert json.loads(rank_steps.rank_file(directory, 1).read_text()) == steps
        assert sorted(p.name for p in directory.iterdir()) == ["rank-0.json", "rank-1.json"]  # no partial left
        assert zero.handed_over() == {1: steps}
        one.close()
    finally:
        zero.close()
    waited = time.monotonic()
    rank_steps.receive(Rendezvous(0, 3, "127.0.0.1", free_port(), 10, run_token="c"), tmp_path / "none", 3, wait_s=0.5)
    assert 0.5 <= time.monotonic() - waited < 3  # the ranks that never hand over are waited for at most wait_s


@pytest.mark.slow
def test_a_stopped_rank_on_another_host_hands_its_steps_to_process_0(tmp_path):
    """Two ranks as on two hosts (each its own TMPDIR: what a rank writes there, process 0 cannot read), started by
    hand with torchrun's variables and stopped together: process 0's record totals both ranks' steps, which only
    the rendezvous carried from rank 1."""
    token = f"two-hosts-{uuid.uuid4().hex[:8]}"
    ranks = []
    for rank in (0, 1):
        tmp = tmp_path / f"host{rank}"
        tmp.mkdir()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp), "RANK": str(rank), "WORLD_SIZE": "2",
               "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": str(rank), "DLBENCH_NUM_NODES": "2",
               "DLBENCH_COORDINATOR": "127.0.0.1", "DLBENCH_RUN_TOKEN": token, "DLBENCH_LAUNCHER": "benchrun-local"}
        ranks.append(Started([sys.executable, "-m", "benchmarks", *RUN, "--strategy", "ddp", *LONG, "--json"], env=env))
    ranks[0].wait_for("step 3/100000 (repeat 1)", 300)
    for started in ranks:
        started.proc.send_signal(signal.SIGTERM)
    (out, err), (_, err1) = (started.communicate(timeout=120) for started in ranks)
    assert ranks[0].proc.returncode == EXIT_INTERRUPTED and "Traceback" not in err + err1, (err + err1)[-3000:]
    record = validate_record(json.loads([line for line in out.splitlines() if line.startswith("{")][-1]))
    message = record["error"]["message"]
    assert "missing" not in message and "every rank completed" in message, message
    assert [row["rank"] for row in record["ranks"]] == [0, 1] and record["throughput"]["total_images"] > 0
    assert not list((tmp_path / "host1").glob("dlbench-steps-*")), "rank 1 handed its steps over: no file of its own"
    assert not list((tmp_path / "host0").glob("dlbench-steps-*")), "process 0 removed what it read"


# -- benchrun: run, sweep, compare-runtimes ------------------------------------------------------------------

@pytest.mark.slow
def test_benchrun_run_ends_on_a_hang_up_with_the_record(tmp_path):
    started = Started([sys.executable, "-m", "runners", "run", "--runtime", "local", "--", *RUN, *LONG],
                      env={**os.environ, "PYTHONPATH": str(ROOT)})
    started.wait_for("step 2/100000 (repeat 1)", 180)
    descendants = processes.descendants(started.proc.pid)
    started.proc.send_signal(signal.SIGHUP)
    out, err = started.communicate(timeout=120)
    assert started.proc.returncode == EXIT_INTERRUPTED and "Traceback" not in err, err[-3000:]
    record = validate_record(json.loads([line for line in out.splitlines() if line.startswith("{")][-1]))
    assert record["status"] == "interrupted" and record["throughput"]["total_images"] >= 4
    assert not [pid for pid in descendants if processes.alive(pid)]


@pytest.mark.slow
def test_a_sweep_keeps_its_finished_points_and_ends_on_a_hang_up(tmp_path):
    marker = uuid.uuid4().hex
    plan = tiny_plan(num_batches=[2, 100000])  # the first point finishes, the second runs until stopped
    plan["bench"] = {k: v for k, v in plan["bench"].items() if k != "num_batches"}
    store = tmp_path / "sweep.jsonl"
    started = Started([sys.executable, "-m", "runners", "sweep", write_plan(tmp_path / "plan.yaml", plan),
                       "--store", store], env={**os.environ, "PYTHONPATH": str(ROOT), "DLBENCH_TEST_MARK": marker})
    started.wait_for("ok  ", 300)
    deadline = time.monotonic() + 120
    while "".join(p.read_text() for p in tmp_path.rglob("*.log")).count("building ") < 2:  # the second one's worker
        assert time.monotonic() < deadline and started.proc.poll() is None, "".join(started.err)[-3000:]
        time.sleep(0.1)
    started.proc.send_signal(signal.SIGHUP)
    _, err = started.communicate(timeout=180)
    assert started.proc.returncode == EXIT_INTERRUPTED and "Traceback" not in err, err[-3000:]
    statuses = sorted(entry["record"]["status"] for entry in lines(store))
    assert statuses == ["interrupted", "ok"]
    assert not marked(marker)


# -- Slurm's pre-timeout warning, for real ---------------------------------------------------------------------

def _batch_job(tmp_path, cluster: dict, *sbatch: str) -> tuple[str, object, object]:
    """A batch job whose shell is bench itself (`exec`: the warning `B:` sends reaches bench, not a shell that dies
    of it); (job id, the job's output file, bench's --output)."""
    out, log = tmp_path / "runs.jsonl", tmp_path / "job.out"
    script = tmp_path / "job.sh"
    argv = " ".join([sys.executable, "-m", "benchmarks", *RUN, *LONG, "--output", str(out)])
    script.write_text(f"#!/bin/sh\nexport PYTHONPATH={ROOT}\nexec {argv}\n")
    job = subprocess.run(["sbatch", "--parsable", f"--output={log}", f"--chdir={tmp_path}", *sbatch, str(script)],
                         env=cluster["env"], capture_output=True, text=True, timeout=60, check=True)
    return job.stdout.strip().split(";")[0], log, out


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _job(cluster: dict, job: str) -> str:
    shown = subprocess.run(["scontrol", "-o", "show", "job", job], env=cluster["env"], capture_output=True, text=True)
    return shown.stdout


def _measured_until_warned(cluster: dict, job: str, log, out) -> dict:
    """The job ended by itself with bench's exit code (130: interrupted), the record naming the warning."""
    ended = ("JobState=COMPLETED", "JobState=FAILED", "JobState=CANCELLED", "JobState=TIMEOUT")
    _wait_for(lambda: any(state in _job(cluster, job) for state in ended), 180, f"job {job} still running")
    assert "ExitCode=130:0" in _job(cluster, job), _job(cluster, job)
    record = validate_record(lines(out)[-1])
    assert record["status"] == "interrupted" and record["error"]["signal"] == "SIGUSR1", log.read_text()[-3000:]
    assert "stopped at a step boundary by SIGUSR1" in record["error"]["message"]
    assert "Traceback" not in log.read_text()
    return record


@pytest.mark.slow
def test_scancel_signal_usr1_to_the_batch_shell_stops_bench_at_a_step_boundary(tmp_path, slurm_single):
    job, log, out = _batch_job(tmp_path, slurm_single)
    _wait_for(lambda: log.exists() and "step 3/100000 (repeat 1)" in log.read_text(), 180, "no timed step")
    subprocess.run(["scancel", "--batch", "--signal=USR1", job], env=slurm_single["env"], check=True, timeout=60)
    record = _measured_until_warned(slurm_single, job, log, out)
    _steps_kept(record, 3)


@pytest.mark.slow
def test_slurms_pre_timeout_warning_ends_the_job_with_what_was_measured(tmp_path, slurm_single):
    """--time=1 --signal=B:USR1@40: Slurm warns 20 s into the job or, as it documents, up to 60 s earlier (seen: at
    once, while bench was still loading); bench stops at the next step boundary and records what it measured, before
    the time limit kills anything."""
    job, log, out = _batch_job(tmp_path, slurm_single, "--time=1", "--signal=B:USR1@40")
    record = _measured_until_warned(slurm_single, job, log, out)
    if record["throughput"] is None:  # warned before the first timed step
        assert "0 of 100000 timed steps measured" in record["error"]["message"]
    else:
        _steps_kept(record, 1)
    assert record["duration_s"] < 60


@pytest.mark.slow
def test_scancel_of_a_two_node_srun_keeps_every_ranks_steps(tmp_path, slurm_two_nodes):
    """`scancel` of a DDP step over two (emulated) nodes, each rank with its node's own temp dir as on a cluster:
    Slurm sends every task SIGTERM; process 0's record totals both ranks' steps (rank 1's came over the rendezvous)
    and nothing of the run is left on either node."""
    name = f"dlbench-stop-{uuid.uuid4().hex[:8]}"
    bench = " ".join([sys.executable, "-m", "benchmarks", *RUN, "--strategy", "ddp", *LONG, "--json", "--output",
                      f"{tmp_path}/\"$SLURMD_NODENAME\".jsonl"])  # a path of its own on every rank's command line
    rank = f'mkdir -p {tmp_path}/"$SLURMD_NODENAME" && TMPDIR={tmp_path}/"$SLURMD_NODENAME" exec {bench}'
    env = {**slurm_two_nodes["env"], "PYTHONPATH": str(ROOT), "DLBENCH_COORDINATOR": "127.0.0.1"}
    started = Started(["srun", "-J", name, "-n", "2", "--nodes=2", "sh", "-c", rank], env=env)
    def left() -> list[str]:  # the ranks' bench and worker processes, on either node
        commands = [p.info["cmdline"] or [] for p in psutil.process_iter(["cmdline"])]
        return [" ".join(cmd) for cmd in commands
                if cmd[1:2] == ["-m"] and cmd[2].startswith("benchmarks") and str(tmp_path) in " ".join(cmd)]

    started.wait_for("step 3/100000 (repeat 1)", 300)
    assert len(left()) == 4, left()  # two ranks, each a bench and its worker: what must be gone after
    subprocess.run(["scancel", "-n", name], env=env, check=True, timeout=60)
    out, err = started.communicate(timeout=120)
    assert "Traceback" not in err, err[-3000:]
    assert [line for line in out.splitlines() if line.startswith("{")], err[-3000:]  # no record: killed meanwhile
    record = validate_record(json.loads([line for line in out.splitlines() if line.startswith("{")][-1]))
    assert record["status"] == "interrupted" and record["error"]["signal"] == "SIGTERM", record["error"]
    assert record["world"]["launcher"] == "srun" and {row["host"] for row in record["ranks"]} == {"node1", "node2"}
    assert "every rank completed" in record["error"]["message"] and record["throughput"]["total_images"] > 0
    _wait_for(lambda: not left(), 30, "a rank outlived the job")
    assert not list(tmp_path.glob("node2/dlbench-steps-*")), "rank 1 handed its steps over: no file of its own"


def test_a_warning_while_bench_loads_is_taken_by_the_run(monkeypatch):
    """Slurm's warning may come before bench's run can take it: noted from bench's first line (entry.bench), not
    fatal, and handed to the run's StopScope when it is installed."""
    monkeypatch.setattr(processes, "_EARLY", [])
    before = signal.getsignal(signal.SIGUSR2)
    try:
        processes.note_early((signal.SIGUSR2,))
        os.kill(os.getpid(), signal.SIGUSR2)
        with processes.StopScope(signals=(signal.SIGUSR2,)) as scope:
            processes.take_early(scope)
        assert scope.received == [signal.SIGUSR2] and processes._EARLY == []
    finally:
        signal.signal(signal.SIGUSR2, before)


@pytest.mark.slow
def test_compare_runtimes_keeps_its_finished_runs_and_summarises_them_on_a_hang_up(tmp_path):
    """The hang-up lands in round 2's run or just before it: either way round 1 is kept and summarised."""
    out = tmp_path / "cmp"
    started = Started([sys.executable, "-m", "runners", "compare-runtimes", "--runtimes", "local", "--rounds", "3",
                       "--out", out, "--", *RUN, "--num-batches", "3"], env={**os.environ, "PYTHONPATH": str(ROOT)})
    _wait_for(lambda: any("round 1 (1/3), 1/1 local" in line for line in list(started.out)), 300,
              "".join(started.err)[-3000:])
    started.proc.send_signal(signal.SIGHUP)
    stdout, err = started.communicate(timeout=180)
    assert started.proc.returncode == EXIT_INTERRUPTED and "Traceback" not in err, err[-3000:]
    assert "interrupted: the finished runs are kept" in stdout
    runs = lines(out / "runs.jsonl")
    assert runs[0]["round"] == 1 and runs[0]["status"] == "ok" and len(runs) <= 2
    assert (out / "compare.md").exists()


def test_a_stop_before_the_run_has_a_process_still_ends_the_comparison_with_its_summary(tmp_path, monkeypatch,
                                                                                       capsys):
    """On a loaded machine the hang-up above once landed while round 2's run was still being set up (no
    process to stop yet): the stop's KeyboardInterrupt left compare-runtimes from there, "benchrun:
    interrupted" and no summary. Made certain here: round 1 is kept and summarised, exit 130."""
    from runners import cli, dispatch

    real, calls = dispatch.run, []

    def run(request):
        calls.append(request)
        if len(calls) == 2:
            raise KeyboardInterrupt  # what the stop's handler raises where the run is being set up
        return real(request)

    monkeypatch.setattr(dispatch, "run", run)
    out = tmp_path / "cmp"
    code = cli.main(["compare-runtimes", "--runtimes", "local", "--rounds", "3", "--out", str(out), "--", *RUN,
                     "--num-batches", "2"])
    stdout = capsys.readouterr().out
    assert code == EXIT_INTERRUPTED and len(calls) == 2
    assert "interrupted: the finished runs are kept" in stdout and "| local |" in stdout
    assert [run["round"] for run in lines(out / "runs.jsonl")] == [1] and (out / "compare.md").exists()
