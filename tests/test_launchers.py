"""Each launcher's exact argv, and benchrun's input checks."""

import os
import re
import shlex
import signal
import sys

import pytest

from benchmarks.core.errors import UsageError
from benchmarks.runspec import RunSpec
from infra.helpers import ROOT, Started
from infra.slurm import require_mpich
from runners import launchers
from runners.cli import main

BENCH_ARGS = ["--framework", "tf", "--strategy", "ps", "--num-ps", "1"]
SPEC = dict(processes=4, bench=["bench"], run=RunSpec.from_argv(BENCH_ARGS), run_token="t0k3n")


def argv(name, **overrides):
    return launchers.get(name).command(launchers.LaunchSpec(**{**SPEC, **overrides}))


def test_open_mpi_argv():
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    env = ["-x", "DLBENCH_COORDINATOR=n1", "-x", "DLBENCH_NUM_NODES=2", "-x", "DLBENCH_RUN_TOKEN=t0k3n"]
    assert argv("mpirun", hosts=["n1", "n2"]) == [
        "mpirun", "-np", "4", "--bind-to", "none", "--oversubscribe", "--mca", "odls_base_sigkill_timeout", "10", *root,
        "--host", "n1:2,n2:2", *env,
        "bench", *BENCH_ARGS]


def test_mpich_argv():
    assert argv("mpich") == [
        "mpirun.mpich", "-n", "4", "-genv", "DLBENCH_COORDINATOR", "127.0.0.1", "-genv", "DLBENCH_NUM_NODES", "1",
        "-genv", "DLBENCH_RUN_TOKEN", "t0k3n", "bench", *BENCH_ARGS]


def test_torchrun_argv():
    assert argv("torchrun")[0].endswith("torchrun")
    assert argv("torchrun")[1:] == ["--standalone", "--nnodes", "1", "--nproc-per-node", "4", "--no-python",
                                    "bench", *BENCH_ARGS]
    assert argv("torchrun", bench=[sys.executable, "-m", "benchmarks"])[6:8] == ["-m", "benchmarks"]
    with pytest.raises(UsageError, match="torchrun starts one node per invocation"):
        argv("torchrun", hosts=["a", "b"])


def test_horovodrun_argv():
    assert argv("horovodrun")[0].endswith("horovodrun")
    assert argv("horovodrun")[1:] == ["-np", "4", "-H", "localhost:4", "--gloo", "bench", *BENCH_ARGS]
    assert "--gloo" not in argv("horovodrun", extra=["--mpi"])


def test_srun_argv():
    assert argv("srun", extra=["--mpi=pmix"]) == [
        "srun", "--ntasks", "4", "--kill-on-bad-exit=1", "--distribution=cyclic", "--disable-status", "--mpi=pmix",
        "bench", *BENCH_ARGS]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["launch", "--launcher", "pbs", "--", "--framework", "torch"], "unknown launcher 'pbs' (choices: local, mpirun"),
        (["launch", "-n", "0", "--", "--framework", "torch"], "-n must be 1 or more"),
        (["launch", "--num-ps", "1", "--", "--framework", "tf", "--strategy", "allreduce"], "--num-ps 1 needs --strategy ps"),
        (["launch", "--", "--framework", "tf", "--strategy", "ps"], "--strategy ps needs --num-ps 1 or more"),
        (["launch", "--", "--framework", "tf", "--num-ps", "1"], "give --num-ps to benchrun, not to bench"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_benchrun_bad_input(capsys, args, expected):
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("benchrun: error: ") and expected in err[0]


def test_benchrun_dry_run_counts_chief_and_ps(capsys):
    require_mpich()  # the launcher must exist even for --dry-run; a fresh machine installs it here
    assert main(["launch", "--launcher", "mpich", "-n", "2", "--num-ps", "1", "--bench-command", "bench", "--dry-run",
                 "--", "--framework", "tf", "--strategy", "ps"]) == 0
    out = capsys.readouterr().out.strip()
    assert re.match(r"DLBENCH_RUN_TOKEN=[0-9a-f]{16} mpirun\.mpich -n 4 ", out) and out.endswith("bench --framework tf "
                                                                                                 "--strategy ps --num-ps 1")


def test_every_launcher_s_dry_run_shows_the_run_token(capsys, monkeypatch, tmp_path):
    """The token that keeps a run's ranks apart from another run's, and places its ports, is shown for
    every launcher (before, only mpirun's and mpich's own options carried it). The launchers are never
    started: each binary here is an empty file that --dry-run only finds on PATH."""
    for name in launchers.LAUNCHERS:
        binary = launchers.get(name).binary
        if binary:
            (tmp_path / binary).touch(mode=0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    tokens = {}
    for name in launchers.LAUNCHERS:
        assert main(["launch", "--launcher", name, "-n", "2", "--bench-command", "bench", "--dry-run", "--",
                     "--framework", "torch"]) == 0
        out = capsys.readouterr().out
        assert out.count("\n") == 1 and out.endswith("bench --framework torch\n"), out
        first, *rest = out.split()
        assert first.startswith("DLBENCH_RUN_TOKEN="), out
        tokens[name] = first.removeprefix("DLBENCH_RUN_TOKEN=")
        passed_on = " ".join(rest).count("DLBENCH_RUN_TOKEN")  # mpirun's -x, mpich's -genv: the same token
        separator = "=" if name == "mpirun" else " "
        assert passed_on == (name in ("mpirun", "mpich")) == " ".join(rest).count(f"DLBENCH_RUN_TOKEN{separator}{tokens[name]}")
    assert set(tokens) == {"local", "srun", "torchrun", "horovodrun", "mpirun", "mpich"}
    assert len(set(tokens.values())) == len(tokens) and all(len(t) == 16 for t in tokens.values())  # one per run


def test_missing_launcher_binary_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(ROOT / "no-such-dir"))
    assert main(["launch", "--launcher", "horovodrun", "--", "--framework", "torch"]) == 2
    assert "needs 'horovodrun', which is not on PATH" in capsys.readouterr().err


def test_srun_names_the_node_that_failed_not_the_survivor():
    srun = launchers.get("srun")
    assert srun.fault() is None
    srun.said = ["bench: step 3/5000 (repeat 1): 4.1 images/sec", "srun: error: Node failure on node2",
                 "slurmstepd-node1: error: *** STEP 7.0 ON node1 CANCELLED AT 2026-11-23T17:23:42 DUE TO NODE FAILURE ***",
                 "srun: error: Node failure on node2", "srun: error: node1: task 0: Terminated"]
    assert srun.fault() == "Slurm node node2 failed during the run (srun: Node failure on node2)"
    assert launchers.get("local").fault() is None


def test_horovodrun_names_the_rank_that_failed_first():
    """horovodrun stops every rank once one fails; process 0 then records only SIGTERM. Its own words
    (perf/fault_matrix.py, a rank killed in its image) name the rank."""
    import socket

    horovodrun = launchers.get("horovodrun")
    assert horovodrun.fault() is None
    horovodrun.said = ["RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus "
                       "causing the job to be terminated. The first process to do so was:", "Process name: 1",
                       "Exit code: 137", ""]
    assert horovodrun.fault() == f"rank 1 was killed by SIGKILL on {socket.gethostname()}; horovodrun stopped the others"
    horovodrun.said = ["Process name: 0", "Exit code: 137"]
    assert horovodrun.fault() == f"process 0 was killed by SIGKILL on {socket.gethostname()}; horovodrun stopped the others"
    horovodrun.said = ["Process name: 1", "Exit code: 3"]  # out of memory: its report to process 0 says so
    assert horovodrun.fault() is None


def ranks(*programs):
    import subprocess

    return [subprocess.Popen([sys.executable, "-c", program], start_new_session=True) for program in programs]


SLEEP, KILL_SELF = "import time; time.sleep(60)", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"


def test_a_rank_dying_while_process_0_waits_is_named_after_process_0_is_stopped(monkeypatch):
    """At start-up only the launcher sees a rank die (it never met process 0): it stops process 0 after
    3 x STOP_GRACE_S (shortened here) and says which rank died of what."""
    from runners.launchers import base

    monkeypatch.setattr(base, "STOP_GRACE_S", 0.3)
    procs = ranks(SLEEP, KILL_SELF)
    code, why = base.wait_ranks(procs, timeout_s=30)
    assert code == 128 + 15 and why == "rank 1 was killed by SIGKILL and process 0, still waiting for it, was stopped 0.9 s later"
    assert all(p.poll() is not None for p in procs)


def test_process_0_killed_is_said_and_a_clean_end_says_nothing():
    from runners.launchers import base

    assert base.wait_ranks(ranks(KILL_SELF, SLEEP), timeout_s=30) == (137, "process 0 was killed by SIGKILL before it wrote a "
                                                                           "record")
    assert base.wait_ranks(ranks("pass", "pass"), timeout_s=30) == (0, None)
    assert base.wait_ranks(ranks("raise SystemExit(1)", "pass"), timeout_s=30) == (1, None)  # its record says why


def test_a_stopped_launch_exits_130_whatever_its_ranks_exit_with():
    """`benchrun launch` does not read the record: a launcher's code after a stop says nothing of it (Hydra's is 0
    when the stopped rank 1, which exits 0, ends last; CI saw it). Here the one rank exits 0 on SIGTERM, so the
    launcher's code is 0: a stopped launch is 130 all the same."""
    rank = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); "
            "print('rank ready', file=sys.stderr, flush=True); time.sleep(120)")
    started = Started([sys.executable, "-m", "runners", "launch", "--launcher", "local", "-n", "1", "--bench-command",
                       f"{sys.executable} -c {shlex.quote(rank)}", "--", "--framework", "torch"])
    started.wait_for("rank ready", 60)
    started.proc.send_signal(signal.SIGTERM)
    _, err = started.communicate(timeout=60)
    assert started.proc.returncode == 130, err
    assert "benchrun: interrupted: stopping all ranks" in err
