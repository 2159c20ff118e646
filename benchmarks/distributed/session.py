"""A rank's session, written once for training runs and `bench comm`: meet the other ranks, gather
on process 0, learn that a peer failed, serve until the chief is done, and say who took part.

Both measurements derive from RankSession, so a fault ends the same way in either: a failed
peer's report becomes process 0's record (it names the rank that failed first; this rank's own
error is often only the collective noticing it).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import threading
import time

from ..core import processes
from ..core.errors import UsageError
from . import cluster, strategies
from . import world as worlds
from .rendezvous import DONE, Rendezvous
from .world import Distributed, world_section

PEER_REPORT_GRACE_S = 10.0  # how long process 0 waits for a failed peer's report before blaming itself (busy hosts are slow)


def silent_ranks_text(silent: dict, now: float) -> str:
    """The ranks process 0 stopped hearing from ({rank: {"host", "since"}}, as RankSession keeps them)."""
    return "; ".join(f"rank {rank} on {info['host']} not heard from for {now - info['since']:.0f} s (stopped, or its host hangs)"
                     for rank, info in sorted(silent.items(), key=lambda item: int(item[0])))


def config_digest(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


class RankSession:
    """What is known of the run so far, so a failure at any point still yields a full record.
    Subclasses measure (run) and make the record (finish(status, error))."""

    program = "bench"  # names the command in progress lines and errors

    def __init__(self, base: dict, strategy: str, num_ps: int, rendezvous_port: int, rendezvous_timeout: float,
                 on_peer_failure=None, on_silence=None):
        self.base = base  # run_id, timestamp, provenance from the supervisor
        self.strategy = strategies.get(strategy)
        self.num_ps = num_ps
        self.rendezvous_port, self.rendezvous_timeout = rendezvous_port, rendezvous_timeout
        self.on_peer_failure = on_peer_failure  # writes a failed peer's record and ends the process
        self.on_silence = on_silence  # hands the silent ranks to the supervisor, which names them if it stops the run
        self.silent: dict[int, dict] = {}  # process 0: ranks alive but not heard from -> {"host", "since" (epoch s)}
        self.world = worlds.World()
        self.peers: list[dict] = []
        self.backend = None  # the framework (training) or communication backend, once the subclass loads it
        self.rendezvous: Rendezvous | None = None
        self.peer_failed = threading.Event()
        self.peer_record: dict | None = None  # a failed peer's report, as this run's record (process 0)
        self._outcome = threading.Lock()  # who writes the record when a peer fails: see _peer_failed, failure
        self._failing = False  # the main thread is in failure(): it writes the peer's record itself
        self.started = time.monotonic()
        self.host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()

    @classmethod
    def unwinds(cls, spec: dict, world: worlds.World) -> bool:
        """This process, stopped, unwinds and keeps what it measured in its own record (benchmarks/run/worker.py):
        a run of one process. Another rank of several may be blocked in a collective its stopped peers never join."""
        return world.size == 1

    def progress(self, message: str) -> None:
        print(f"{self.program}: {message}", file=sys.stderr, flush=True)

    # -- meeting the other ranks -----------------------------------------------------------------

    def meet(self, config: dict, tf_ports: tuple[int, int] | None) -> Distributed:
        """Every rank's address, host and role; `tf_ports` (worker, PS): TensorFlow's cluster spec is
        set from them, which must precede TensorFlow's import."""
        self.world = world = worlds.detect()
        role = self.strategy.role(world.rank, world.size, self.num_ps)
        coordinator = worlds.coordinator_host(world)
        me = {
            "address": cluster.my_address(world),
            "host": self.host,
            "role": role.as_dict(),
            "config": config_digest(config),
            "run_id": self.base["run_id"],  # process 0's names the run's --trace directory
        }
        if world.size > 1:
            self.progress(f"rank {world.rank}/{world.size} ({role.kind} {role.index}): "
                          f"meeting at {coordinator}:{self.rendezvous_port}")
            self.rendezvous = Rendezvous(
                world.rank, world.size, coordinator, self.rendezvous_port, self.rendezvous_timeout,
                on_failure=self._peer_failed, run_token=worlds.run_token(), on_silence=self._silence,
            )
            self.peers = self.rendezvous.allgather("hello", me)
        else:
            self.peers = [me]
        if len({peer["config"] for peer in self.peers}) > 1:
            raise UsageError(f"ranks were started with different {self.program} arguments")
        if tf_ports is not None:
            os.environ["TF_CONFIG"] = json.dumps(cluster.tf_config(self.peers, world.rank, *tf_ports))
        return Distributed(world, role, coordinator, self.peers)

    def gather(self, tag: str, value) -> list | None:
        """Every rank's value on process 0; None on the others."""
        if self.rendezvous is None:
            return [value]
        values = self.rendezvous.allgather(tag, value)
        return values if self.world.rank == 0 else None

    def serve_until_done(self, role, serving=None) -> None:
        """A process that only serves (a parameter server, a PS worker) waits here for the chief, doing
        its part of the chief's work (`serving()`) first."""
        self.progress(f"{role.kind} {role.index}: serving until the chief finishes")
        if serving is not None:
            serving()
        self.rendezvous.allgather(DONE, None, wait_forever=True)

    def close_backend(self) -> None:
        """The backend's shutdown, bounded: Horovod's (MPI_Finalize) can wait on a peer for ever on a loaded
        host, and the measurement already taken must not be lost to that (docs/results.md). Process 0 gives
        up first: MPICH's Hydra ends the whole job once a rank leaves unfinalized, and process 0 still has
        the record to write."""
        grace = processes.CLOSE_GRACE_S if self.world.rank == 0 else processes.PEER_CLOSE_GRACE_S
        if self.backend is not None and not processes.returns_within(self.backend.close, grace):
            self.progress(f"warning: the {type(self.backend).__name__} backend did not shut down within "
                          f"{grace} s (MPI_Finalize waiting for a peer?); leaving without it, the measurement kept")

    def leave(self) -> None:
        """After success only: on a failure the rendezvous stays open so that a failed peer's report
        still reaches process 0 (failure() waits for it); the process then exits."""
        if self.rendezvous is not None:
            if self.strategy.gathers_at_chief:  # release the processes that only serve, which wait for this
                self.rendezvous.allgather(DONE, None)
            self.rendezvous.close()

    def _peer_failed(self, message: dict) -> None:
        """Process 0 learns that another rank failed: that is this run's outcome. The main thread writes
        it when it is failing too (failure() waits for it); else it may be stuck in a collective with
        the dead rank, and on_peer_failure writes the record and ends the process from here."""
        remote = message["record"]
        rank = message["rank"]
        error = dict(remote.get("error") or {"kind": "crash"})
        error["message"] = f"rank {rank} on {self.host_of(rank)}: {error.get('message', remote['status'])}"
        peer_record = self.finish(remote["status"], error)
        with self._outcome:  # held while on_peer_failure writes and exits: failure() cannot write beside it
            self.peer_record = self.peer_record or peer_record
            self.peer_failed.set()
            if not self._failing and self.on_peer_failure is not None:
                self.on_peer_failure(peer_record)

    def _silence(self, seconds: dict[int, float]) -> None:
        now = time.time()
        self.silent = {rank: {"host": self.host_of(rank), "since": now - quiet} for rank, quiet in seconds.items()}
        if self.on_silence is not None:
            self.on_silence(self.silent)

    def host_of(self, rank: int) -> str:
        return self.peers[rank]["host"] if rank < len(self.peers) else "?"

    # -- the record ------------------------------------------------------------------------------

    def failure(self, status: str, kind: str, message: str) -> dict:
        """This rank's failure as the record; on process 0 a failed peer's report wins, waited for at
        most PEER_REPORT_GRACE_S (a rank that vanished is reported for it by the rendezvous within that;
        none is waited for when every other rank is silent), and a silent rank is named first (a collective
        that timed out waiting for it says only that)."""
        if self.world.rank == 0 and self.world.size > 1:
            with self._outcome:
                self._failing = True
            grace_s = 0 if len(self.silent) == self.world.size - 1 else PEER_REPORT_GRACE_S
            if self.peer_failed.wait(grace_s) and self.peer_record is not None:
                return self.peer_record
            if self.silent:
                message = f"{silent_ranks_text(self.silent, time.time())}; {message}"
        return self.finish(status, {"kind": kind, "message": message})

    def world_section(self) -> dict:
        return world_section(self.world, self.strategy.name, self.num_ps, [peer["host"] for peer in self.peers])
