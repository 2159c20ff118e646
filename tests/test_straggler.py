"""Who is slow: the "why it does not scale" report names the straggler (rank and host) only when its
excess compute is beyond the ranks' step-to-step noise, and says "within noise" otherwise. The rule on
records with known traces; then real multi-rank runs on this machine, one rank planted slow (a CPU quota of
its own while it is traced) and the same runs without the plant."""

from __future__ import annotations

import contextlib
import copy
import os
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import psutil
import pytest

from benchmarks.measure import trace
from infra.helpers import ROOT, bench, last_json_line, python_env, validate_record
from infra.records import RecordFactory
from runners.reporting import why

HOSTS = ["node-a", "node-b", "node-c", "node-d"]


def traced(record: dict, step_s: float, computes: list[list[float]], ceilings: list[float] | None = None) -> dict:
    """`record` as a synchronous run whose ranks computed these times per profiled step (the rest idle)."""
    r = copy.deepcopy(record)
    r["step_time_s"]["mean"], r["input_wait_s"]["mean"] = step_s, 0.0
    longest = max(max(steps) for steps in computes)
    ranks, rows = [], []
    for index, steps in enumerate(computes):
        full = [{"step_s": longest, "compute_s": c, "communication_s": 0.0, "exposed_communication_s": 0.0,
                 "overlap_s": 0.0, "input_s": 0.0, "idle_s": longest - c} for c in steps]
        ranks.append({"rank": index, "source": "profiler-events", "steps": full, "mean": trace.mean_step(full),
                      "overlap_fraction": None})
        rows.append({**r["ranks"][0], "rank": index, "host": HOSTS[index],
                     "ceiling_flops_per_sec": ceilings[index] if ceilings else None})
    r["trace"] = {"dir": "/t", "steps": len(computes[0]), "ranks": ranks}
    r["ranks"] = rows
    return validate_record(r)


@pytest.fixture
def R(real_record):  # noqa: N802 - R(...) reads as "a record with" in every assertion below
    return RecordFactory(real_record)


def loss_of(R, computes, ceilings=None, step_s=0.2):
    one = traced(R(10.0, strategy="ddp"), 0.1, [[0.1, 0.1, 0.1]])
    many = traced(R(8.0, strategy="ddp", workers=len(computes)), step_s, computes, ceilings)
    (loss,) = why.scaling_loss([one, many])
    return loss


def test_a_rank_computing_longer_in_every_step_is_named_with_its_host_and_share(R):
    loss = loss_of(R, [[0.100, 0.102, 0.098, 0.101], [0.150, 0.149, 0.152, 0.151]], ceilings=[2e11, 1e11])
    found = loss.straggler
    assert found.rank == 1 and found.hosts == ["node-b"] and found.named and found.steps == 4
    sentence = why.straggler_sentence(loss)
    assert sentence.startswith("at 2 workers the straggler is rank 1 on node-b: ")
    assert "beyond the ranks' noise" in sentence and "% of the lost 100.0 ms/step" in sentence
    assert "ceiling 100.0 GFLOP/s, the median rank's 150.0" in sentence
    # the straggler wait the loss split books is the named rank's excess over the median rank
    assert found.excess_s == pytest.approx(loss.parts["straggler_wait"])


def test_a_spread_within_the_step_to_step_noise_names_no_one(R):
    loss = loss_of(R, [[0.10, 0.16, 0.09, 0.15], [0.12, 0.14, 0.11, 0.16]])
    assert not loss.straggler.named
    assert "no straggler" in why.straggler_sentence(loss) and "within the ranks' noise" in why.straggler_sentence(loss)


def test_a_real_but_negligible_difference_names_no_one(R):
    """1% more compute in every step, with almost no spread: significant, under STRAGGLER_FLOOR."""
    loss = loss_of(R, [[0.1000, 0.1001, 0.1000, 0.1001], [0.1010, 0.1011, 0.1010, 0.1011]])
    assert loss.straggler.difference_s > loss.straggler.noise_s and not loss.straggler.named


def test_four_ranks_the_slowest_against_the_median(R):
    # timed step = traced step (0.21 s): no scaling
    loss = loss_of(R, [[0.10, 0.11, 0.10], [0.11, 0.10, 0.10], [0.10, 0.10, 0.11], [0.20, 0.21, 0.20]], step_s=0.21)
    assert loss.straggler.rank == 3 and loss.straggler.named and loss.straggler.hosts == ["node-d"]
    assert loss.straggler.excess_s == pytest.approx(0.2033333 - 0.1033333, rel=1e-3)


def test_nothing_to_judge_without_traces_or_with_one_step(R):
    one = traced(R(10.0, strategy="ddp"), 0.1, [[0.1]])
    two = traced(R(8.0, strategy="ddp", workers=2), 0.2, [[0.1], [0.2]])
    (loss,) = why.scaling_loss([one, two])
    assert loss.straggler is None and why.straggler_sentence(loss) is None


# -- real runs: a planted straggler ---------------------------------------------------------------

RUN = ["--framework", "torch", "--model", "alexnet", "--image-size", "64", "--batch-size", "8", "--num-threads", "1",
       "--num-warmup-batches", "1", "--num-batches", "4", "--json", "--display-every", "0", "--device", "cpu"]
TRACE_STEPS = "8"
CGROUP_CPU = Path("/sys/fs/cgroup/cpu")  # cgroup v1's cpu controller (v2: cpu.max in the unified tree)
QUOTA = 0.1  # of one CPU: a third of what a rank gets on this 2-core machine with 4 ranks and another test beside it


class Quota:
    """The plant: a CPU quota (a cgroup of its own) that processes are moved into once they run. Moved when
    the rank starts its traced steps, the only steps the straggler is judged on: its start (Python, torch)
    and timed loops, which every rank would wait for, are not slowed (planted from the warmup on, the test
    took ~3 min per case at 5% of a CPU under CI; the traced steps alone, 8 of ~0.3 s, take 24 s at 10%)."""

    def __init__(self, share: float):
        self.path = CGROUP_CPU / f"dlbench-straggler-{uuid.uuid4().hex[:8]}"
        self.path.mkdir()
        (self.path / "cpu.cfs_period_us").write_text("100000")
        (self.path / "cpu.cfs_quota_us").write_text(str(int(share * 100000)))

    def take(self, pid: int) -> None:
        parent = psutil.Process(pid)
        for process in [parent, *parent.children(recursive=True)]:
            (self.path / "cgroup.procs").write_text(str(process.pid))

    def remove(self) -> None:
        for pid in (self.path / "cgroup.procs").read_text().split():  # back to the root group, then gone
            with contextlib.suppress(OSError):
                (CGROUP_CPU / "cgroup.procs").write_text(pid)
        self.path.rmdir()


def can_plant() -> bool:
    return os.geteuid() == 0 and (CGROUP_CPU / "cpu.cfs_quota_us").exists() and os.access(CGROUP_CPU, os.W_OK)


def ranks_run(n: int, tmp_path, env: dict, quota: Quota | None) -> dict:
    """n ranks of one synchronous run started by hand (launcher `env`), each with --trace; the last one put
    under `quota` when its traced steps begin. Process 0's record."""
    token = uuid.uuid4().hex
    processes, errors = [], []
    for rank in range(n):
        variables = python_env({**env, "RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(rank),
                                "LOCAL_WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1", "DLBENCH_RUN_TOKEN": token})
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "benchmarks", *RUN, "--strategy", "ddp", "--trace", str(tmp_path / "traces"),
             "--trace-steps", TRACE_STEPS], cwd=ROOT, env=variables, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True))
    readers = []
    for rank, process in enumerate(processes):
        lines: list[str] = []
        errors.append(lines)
        plant = quota is not None and rank == n - 1

        def read(process=process, lines=lines, plant=plant):
            for line in process.stderr:
                lines.append(line)
                if plant and ": tracing " in line:
                    quota.take(process.pid)

        readers.append(threading.Thread(target=read, daemon=True))
        readers[-1].start()
    outs = [process.stdout.read() for process in processes]
    for process, reader, lines in zip(processes, readers, errors):
        process.wait(timeout=900)
        reader.join(timeout=10)
        assert process.returncode == 0, "".join(lines)[-3000:]
    return validate_record(last_json_line(outs[0]))


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory) -> tuple[dict, dict]:
    """The 1-rank run every case compares against (one per module: it is the same run), and the environment the
    ranks run in: its cache, which the 1-rank run fills and the ranks read back."""
    env = {"XDG_CACHE_HOME": str(tmp_path_factory.mktemp("straggler") / "cache")}
    one = bench(*RUN, env=env)
    assert one.returncode == 0, one.stderr
    return validate_record(last_json_line(one.stdout)), env


def straggler_verdict(n: int, tmp_path, plant: bool, one_rank: tuple[dict, dict]) -> tuple[why.ScalingLoss, str]:
    one, env = one_rank
    quota = Quota(QUOTA) if plant else None
    try:
        many = ranks_run(n, tmp_path, env, quota)
    finally:
        if quota is not None:
            quota.remove()
    (loss,) = why.scaling_loss([copy.deepcopy(one), many])
    sentence = why.straggler_sentence(loss)
    print(sentence)
    return loss, sentence


@pytest.mark.slow
@pytest.mark.skipif(not can_plant(), reason="the plant needs root and cgroup v1's cpu controller")
@pytest.mark.parametrize("n", [2, 4])
def test_a_planted_straggler_is_named_by_rank_and_host_with_its_share(n, tmp_path, one_rank):
    loss, sentence = straggler_verdict(n, tmp_path, plant=True, one_rank=one_rank)
    assert loss.straggler is not None and loss.straggler.named, sentence
    assert loss.straggler.rank == n - 1 and loss.straggler.hosts == [socket.gethostname()]
    assert sentence.startswith(f"at {n} workers the straggler is rank {n - 1} on {socket.gethostname()}: ")
    assert "% of the lost" in sentence


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 4])
def test_without_the_plant_no_straggler_is_named(n, tmp_path, one_rank):
    loss, sentence = straggler_verdict(n, tmp_path, plant=False, one_rank=one_rank)
    assert loss.straggler is not None, sentence
    if loss.straggler.named:
        # Never one of the plant's size (perf/headroom.md: +70% of the median at 2 ranks, +4.3x at 4). On our 2-core
        # machines the ranks share the cores with the other test worker's programs, and a rank can truly be slower
        # by a few percent there: a noisy neighbour makes a real straggler (CI, 2026-12-05: rank 2 of 4 named at
        # +9.5% of the median compute, its difference 130 ms against a noise of 123 ms).
        assert loss.straggler.excess_s < 0.25 * loss.straggler.median_compute_s, sentence
    else:
        assert "no straggler" in sentence and "within the ranks' noise" in sentence
