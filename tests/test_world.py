"""Rank detection from each launcher's variables, roles and TF cluster specs (no processes)."""

import json
import threading
import time

import pytest

from benchmarks.core.errors import UsageError
from benchmarks.distributed import cluster, strategies
from benchmarks.distributed.rendezvous import Rendezvous, RendezvousError, report_failure
from benchmarks.distributed.world import World, coordinator_host, detect, expand_nodelist
from benchmarks.measure.totals import aggregate
from benchmarks.settings.options import SEED_000_PORTS, TOKEN_PORTS


def test_single_process_without_launcher():
    assert detect({}) == World()


def test_torchrun_variables():
    w = detect({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
                "MASTER_ADDR": "n01", "TORCHELASTIC_RUN_ID": "x"})
    assert (w.rank, w.size, w.local_rank, w.local_size, w.node_rank, w.launcher, w.coordinator) == (
        3, 4, 1, 2, 1, "torchrun", "n01")


def test_open_mpi_variables():
    w = detect({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_NODE_RANK": "1"})
    assert (w.rank, w.size, w.local_rank, w.local_size, w.num_nodes, w.launcher) == (5, 8, 1, 4, 2, "mpirun")


def test_mpich_hydra_variables():
    w = detect({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"})
    assert (w.rank, w.size, w.local_rank, w.launcher) == (1, 2, 1, "mpich")


def test_slurm_variables_and_coordinator_from_nodelist():
    env = {"SLURM_PROCID": "2", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "0",
           "SLURM_NODEID": "1", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "nid[0007-0008]",
           "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "PMI_RANK": "2"}
    w = detect(env)
    assert (w.rank, w.size, w.node_rank, w.num_nodes, w.local_size, w.launcher) == (2, 4, 1, 2, 2, "srun")
    assert coordinator_host(w) == "nid0007"


def test_horovodrun_variables():
    w = detect({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2"})
    assert (w.rank, w.size, w.launcher) == (1, 2, "horovodrun")


def test_expand_nodelist():
    assert expand_nodelist("node[1-3,7],gpu01") == ["node1", "node2", "node3", "node7", "gpu01"]
    assert expand_nodelist("nid[0009-0011]") == ["nid0009", "nid0010", "nid0011"]
    assert expand_nodelist("a[1-2]-ib") == ["a1-ib", "a2-ib"]


def test_roles_under_ps():
    roles = [strategies.get("ps").role(r, 5, 2) for r in range(5)]
    assert [(r.kind, r.index) for r in roles] == [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0), ("ps", 1)]
    assert strategies.get("ddp").role(1, 2, 0) == strategies.Role("worker", 1)
    with pytest.raises(UsageError, match="needs at least 4 processes"):
        strategies.get("ps").role(0, 3, 2)


def test_ports_not_given_are_placed_by_the_run_token():
    """Seed 000's ports without a token; with one, the same layout at a place in TOKEN_PORTS that the token
    picks (sha256: the same in every process), and different tokens spread over the range."""
    assert cluster.run_ports({}, None) == SEED_000_PORTS
    placed = cluster.run_ports({}, "slurm 12.0")
    assert placed == cluster.run_ports({"rendezvous_port": None}, "slurm 12.0")
    assert placed["rendezvous_port"] in TOKEN_PORTS and placed["rendezvous_port"] + 64 < 32768  # no ephemeral port
    assert (placed["worker_port"], placed["ps_port"]) == (placed["rendezvous_port"] + 10, placed["rendezvous_port"] + 20)
    spread = {cluster.run_ports({}, f"run-{i}")["rendezvous_port"] for i in range(1000)}
    assert len(spread) > 950 and min(spread) < TOKEN_PORTS.start + 2000 and max(spread) > TOKEN_PORTS.stop - 2000
    # what is given stays; the others follow --rendezvous-port, given or not
    assert cluster.run_ports({"rendezvous_port": 5000, "ps_port": 7000}, "t") == {
        "rendezvous_port": 5000, "worker_port": 5010, "ps_port": 7000}


def test_tf_config_ports_follow_seed_000():
    peers = [{"address": "127.0.0.1", "role": {"kind": k, "index": i}}
             for k, i in [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]]
    config = cluster.tf_config(peers, 2, worker_port=2220, ps_port=2230)
    assert config == {
        "cluster": {"chief": ["127.0.0.1:2240"], "worker": ["127.0.0.1:2220", "127.0.0.1:2221"], "ps": ["127.0.0.1:2230"]},
        "task": {"type": "worker", "index": 1},
    }
    json.dumps(config)


def test_greedy_placement_balances_bytes():
    sizes = [100, 1, 1, 1, 60, 50]
    placer = cluster.GreedyPlacer(2)
    assert [placer.place(size) for size in sizes] == [0, 1, 1, 1, 1, 1]
    assert placer.loads == [100, 113]


def test_aggregate_uses_all_images_over_slowest_rank():
    fast = {"images": 20, "wall_time_s": 2.0, "step_times_s": [0.2] * 10, "input_wait_s": [0.0] * 10}
    slow = {"images": 20, "wall_time_s": 4.0, "step_times_s": [0.4] * 10, "input_wait_s": [0.1] * 10}
    result = aggregate([[fast], [slow]], batch_size=2)
    assert result["throughput"]["images_per_sec"] == pytest.approx(40 / 4.0)  # not 2 x rank 0's 10/s
    assert result["repeats"][0]["input_wait_fraction"] == pytest.approx(1.0 / 6.0)
    assert result["step_time_s"]["n"] == 20


def _ranks(size, port, timeout=10.0, on_failure=None):
    return [Rendezvous(r, size, "127.0.0.1", port, timeout, on_failure if r == 0 else None) for r in range(size)]


def test_rendezvous_allgather_in_rank_order(unused_port):
    ranks = _ranks(3, unused_port)
    results = {}
    threads = [threading.Thread(target=lambda r=r: results.__setitem__(r.rank, r.allgather("hello", r.rank * 10)))
               for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert results == {0: [0, 10, 20], 1: [0, 10, 20], 2: [0, 10, 20]}
    for r in ranks:
        r.close()


def test_process_0_goes_on_only_once_every_other_rank_is_answered(unused_port, monkeypatch):
    """The reply to rank 1 is sent by a thread of process 0; if process 0 went on before it was sent, its main
    thread could block, holding the GIL, in a framework call that needs rank 1 (TensorFlow's first
    collective) while that reply waited for the GIL: a loaded CI run deadlocked so, rank 1 timing out after
    300 s. Made certain here with a reply that takes 0.5 s to send: process 0's allgather returns after it."""
    from benchmarks.distributed import rendezvous

    real_send, sent = rendezvous._send, []

    def slow_send(sock, message):
        if "values" not in message:  # a rank's own request or beat, not a reply to a gather
            return real_send(sock, message)
        time.sleep(0.5)
        real_send(sock, message)
        sent.append(message["tag"])

    monkeypatch.setattr(rendezvous, "_send", slow_send)
    rank0, rank1 = _ranks(2, unused_port)
    other = threading.Thread(target=rank1.allgather, args=("preflight", 1))
    other.start()
    assert rank0.allgather("preflight", 0) == [0, 1]
    assert sent == ["preflight"]  # rank 1's answer was on its way before process 0 went on
    other.join(10)
    rank0.close()
    rank1.close()


def test_rendezvous_times_out_naming_missing_ranks(unused_port):
    rank0 = Rendezvous(0, 3, "127.0.0.1", unused_port, 0.5)
    with pytest.raises(RendezvousError, match=r"waiting for ranks \[1, 2\] at 'hello'"):
        rank0.allgather("hello", 0)
    rank0.close()


def test_rendezvous_client_cannot_reach_process_0(unused_port):
    with pytest.raises(RendezvousError, match="could not reach process 0"):
        Rendezvous(1, 2, "127.0.0.1", unused_port, 0.5)


def test_failure_reports_reach_process_0(unused_port):
    got = threading.Event()
    seen = {}
    rank0 = Rendezvous(0, 2, "127.0.0.1", unused_port, 5, on_failure=lambda m: (seen.update(m), got.set()),
                       run_token="run-a")
    assert report_failure("127.0.0.1", unused_port, 1, {"status": "failed"}, "run-b")  # another run's: not heard
    assert report_failure("127.0.0.1", unused_port, 1, {"status": "oom"}, "run-a")
    assert got.wait(5) and seen["rank"] == 1 and seen["record"] == {"status": "oom"}
    rank0.close()


def test_a_rank_of_another_run_is_refused_at_once_and_the_run_goes_on(unused_port):
    """Two runs given one port: the other run's rank fails in one line naming both runs, within
    seconds; this run's ranks still meet (issue 26: they joined each other's rendezvous and hung)."""
    import time

    rank0 = Rendezvous(0, 2, "127.0.0.1", unused_port, 10, run_token="run-a")
    results = {}
    thread = threading.Thread(target=lambda: results.__setitem__(0, rank0.allgather("hello", "a0")))
    thread.start()
    stranger = Rendezvous(1, 2, "127.0.0.1", unused_port, 10, run_token="run-b")
    started = time.monotonic()
    with pytest.raises(RendezvousError, match=rf"127.0.0.1:{unused_port}: the rendezvous port is held by another run "
                                              r"\(its token run-a, this run's run-b\): give concurrent runs distinct "
                                              r"--rendezvous-port values, or none \(each run's token then picks one\)"):
        stranger.allgather("hello", "b1")
    assert time.monotonic() - started < 2
    stranger.close()
    ours = Rendezvous(1, 2, "127.0.0.1", unused_port, 10, run_token="run-a")
    assert ours.allgather("hello", "a1") == ["a0", "a1"]
    thread.join(10)
    assert results == {0: ["a0", "a1"]}
    ours.close()
    rank0.close()


def test_a_rank_that_goes_silent_is_reported_for_it(unused_port, monkeypatch):
    """A rank whose connection closes before "done" (killed with its supervisor: nobody reports) is
    reported to process 0 for it; one that closes after "done" left as it should."""
    import socket
    import time

    from benchmarks.distributed import rendezvous

    monkeypatch.setattr(rendezvous, "LOST_REPORT_WAIT_S", 0.2)
    reports = []
    rank0 = Rendezvous(0, 3, "127.0.0.1", unused_port, 1, on_failure=reports.append, run_token="t")
    clients = [Rendezvous(r, 3, "127.0.0.1", unused_port, 1, run_token="t") for r in (1, 2)]
    threads = [threading.Thread(target=r.allgather, args=("hello", r.rank)) for r in [rank0, *clients]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)

    def done_then_leave():  # rank 2 reaches the end (the others never do: it times out) and leaves
        with pytest.raises(RendezvousError):
            clients[1].allgather("done", None)
        clients[1].close()

    finished = threading.Thread(target=done_then_leave)
    finished.start()
    clients[0]._sock.shutdown(socket.SHUT_RDWR)  # rank 1 dies before "done": no report, no "bye", it closes
    finished.join(10)
    time.sleep(2)  # process 0's side of rank 2's "done" times out too, then sees the close
    assert [(r["rank"], r["record"]["status"]) for r in reports] == [(1, "failed")]
    assert reports[0]["record"]["error"]["message"].startswith("went away without a report")
    rank0.close()


def test_a_second_process_0_on_one_port_is_one_line(unused_port):
    first = Rendezvous(0, 2, "127.0.0.1", unused_port, 5, run_token="run-a")
    with pytest.raises(RendezvousError, match=rf"--rendezvous-port {unused_port} is in use on this host"):
        Rendezvous(0, 2, "127.0.0.1", unused_port, 5, run_token="run-b")
    first.close()


@pytest.mark.parametrize("env, token", [
    ({"DLBENCH_RUN_TOKEN": "abc", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}, "abc"),  # benchrun's wins
    ({"PMIX_NAMESPACE": "7581", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}, "pmix 7581"),  # mpirun inside a job
    ({"HOROVOD_GLOO_RENDEZVOUS_ADDR": "n1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "4000"}, "horovodrun n1:4000"),
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "2", "SLURM_PROCID": "1"}, "slurm 7.2"),
    ({"TORCHELASTIC_RUN_ID": "r9"}, "torchrun r9"),
    ({"TORCHELASTIC_RUN_ID": "none"}, None),  # torchrun's default: not an identity
    ({"PMI_RANK": "0", "PMI_SIZE": "2"}, None),  # MPICH's Hydra has none
])
def test_run_token_from_the_launcher(env, token):
    from benchmarks.distributed.world import run_token

    assert run_token(env) == token


@pytest.fixture
def unused_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_multi_node_world_without_coordinator_is_a_usage_error():
    world = World(rank=1, size=4, local_size=2, num_nodes=2)
    with pytest.raises(UsageError, match="set MASTER_ADDR or DLBENCH_COORDINATOR"):
        coordinator_host(world)
    assert coordinator_host(World(rank=1, size=2, local_size=2)) == "127.0.0.1"


def test_strategy_objects_count_processes_and_invert():
    from benchmarks.core.framework_specs import FRAMEWORKS
    from benchmarks.distributed import strategies

    assert strategies.NAMES == ("none", "ddp", "horovod", "allreduce", "ps", "fsdp")
    ps = strategies.get("ps")
    assert ps.processes(2, 1) == 4 and ps.workers(4, 1) == 2  # 1 chief + 2 workers + 1 PS
    assert ps.uses_ps and ps.gathers_at_chief and ps.frameworks == ("tensorflow",)
    for strategy in strategies.STRATEGIES.values():
        for workers, num_ps in ((1, 1), (3, 2)):
            assert strategy.workers(strategy.processes(workers, num_ps), num_ps) == workers
    assert [s.name for s in strategies.STRATEGIES.values() if s.supports("torch")] == ["none", "ddp", "horovod", "fsdp"]
    assert strategies.get("fsdp").exchange_op is None and "fsdp" not in strategies.COMM_NAMES
    assert strategies.get("none").frameworks == tuple(FRAMEWORKS)  # a new framework runs independent replicas as it is
    assert not strategies.get("none").syncs_replicas and strategies.get("ddp").syncs_replicas
    assert [ps.serves_only(ps.role(r, 4, 1)) for r in range(4)] == [False, True, True, True]
    # who keeps a stopped run's steps in its own record (benchmarks/run/worker.py): a run of one; PS's chief alone
    assert [ps.measures_alone(r, 4) for r in range(4)] == [True, False, False, False]
    assert [strategies.get(name).measures_alone(0, size) for name in ("ddp", "allreduce", "none") for size in (1, 2)] == [
        True, False] * 3


def test_a_rank_that_dies_waiting_for_done_is_reported(unused_port, monkeypatch):
    """A parameter server or PS worker waits in "done" all run long: dying there is dying before the
    end (seen: a killed PS worker went unnoticed and the chief trained on with one worker fewer)."""
    import socket
    import time

    from benchmarks.distributed import rendezvous

    monkeypatch.setattr(rendezvous, "LOST_REPORT_WAIT_S", 0.2)
    reports = []
    rank0 = Rendezvous(0, 2, "127.0.0.1", unused_port, 5, on_failure=reports.append, run_token="t")
    server = Rendezvous(1, 2, "127.0.0.1", unused_port, 5, run_token="t")
    waiting = threading.Thread(target=lambda: pytest.raises(RendezvousError, server.allgather, "done", None,
                                                             wait_forever=True))
    waiting.start()
    time.sleep(0.5)
    server._sock.shutdown(socket.SHUT_RDWR)  # what its death does to the connection
    waiting.join(5)
    deadline = time.monotonic() + 5
    while not reports and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [(r["rank"], r["record"]["status"]) for r in reports] == [(1, "failed")]
    rank0.close()
    server.close()


def test_a_rank_that_leaves_after_its_part_is_not_reported(unused_port, monkeypatch):
    """DDP ranks leave after the last gather without a "done": closing says "bye", so process 0, still
    writing the record on a busy machine, does not take it for a death (seen in a full test run)."""
    import time

    from benchmarks.distributed import rendezvous

    monkeypatch.setattr(rendezvous, "LOST_REPORT_WAIT_S", 0.2)
    reports = []
    rank0 = Rendezvous(0, 2, "127.0.0.1", unused_port, 5, on_failure=reports.append, run_token="t")
    rank1 = Rendezvous(1, 2, "127.0.0.1", unused_port, 5, run_token="t")
    gathered = threading.Thread(target=rank1.allgather, args=("results", 1))
    gathered.start()
    rank0.allgather("results", 0)
    gathered.join(5)
    rank1.close()
    time.sleep(1)
    assert reports == []
    rank0.close()


def test_world_section_counts_the_hosts_that_met_else_reads_the_launcher():
    """The record's one `world` builder (training, `bench comm`, the supervisor's and the host's records).
    Before the ranks meet it reads the launcher (it said 0 processes per node on a record written then)."""
    from benchmarks.distributed.world import world_section

    world = World(rank=0, size=4, local_size=2, num_nodes=2, launcher="srun")
    met = world_section(world, "ddp", 0, ["b", "a", "a", "a"])
    assert (met["nodes"], met["processes_per_node"], met["hosts"], met["workers"]) == (2, 3, ["a", "b"], 4)
    before = world_section(world, "ps", 1)
    assert (before["nodes"], before["processes_per_node"], before["workers"], len(before["hosts"])) == (2, 2, 2, 1)


def test_a_stopped_rank_is_named_silent_and_heard_again_when_it_goes_on(unused_port):
    """Beats on their own connection: a SIGSTOPped rank (alive, saying nothing) is named by process 0,
    named no longer once it goes on, and one that is killed is not silent (it is gone: reported apart)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    changes = []
    rank0 = Rendezvous(0, 2, "127.0.0.1", unused_port, 10, run_token="t", on_silence=changes.append)
    rank1 = subprocess.Popen([sys.executable, "-c", (
        "import time; from benchmarks.distributed.rendezvous import Rendezvous; "
        f"Rendezvous(1, 2, '127.0.0.1', {unused_port}, 10, run_token='t').allgather('hello', 1); time.sleep(120)")])

    def wait_for(check, within_s):
        deadline = time.monotonic() + within_s
        while not check() and time.monotonic() < deadline:
            time.sleep(0.1)
        return check()

    try:
        assert rank0.allgather("hello", 0) == [0, 1]
        time.sleep(3)
        assert changes == []  # beating: not silent
        os.kill(rank1.pid, signal.SIGSTOP)
        assert wait_for(lambda: changes, 15), "a stopped rank was never named"
        assert list(changes[0]) == [1] and changes[0][1] > 5
        os.kill(rank1.pid, signal.SIGCONT)
        assert wait_for(lambda: len(changes) == 2, 10) and changes[1] == {}
        rank1.kill()
        rank1.wait()
        time.sleep(7)
        assert len(changes) == 2, changes  # its beat connection closed: gone, not silent
    finally:
        rank1.kill()
        rank0.close()
