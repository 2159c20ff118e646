"""One `bench comm` run: per operation and message size check the result once, warm up, and time
each iteration; gather every rank's times on process 0. The session (meeting, peer failures,
the world) is RankSession's; the worker runs it under the supervisor, as a training run.
What a timed region holds: docs/comm.md, "Sanity". The measurement runs in a thread so that a
stop (SIGTERM) is handled at once even while a collective blocks in native code.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np

from ..core.errors import Stopped
from ..core.framework_specs import FRAMEWORKS
from ..core.processes import StopScope, returns_within
from ..distributed import world as worlds
from ..distributed.session import RankSession
from ..distributed.strategies.ps import PsStrategy
from ..distributed.world import world_section
from ..frameworks.base import framework_section
from ..measure.timing import clock
from ..run.supervisor import Job
from . import load, metrics
from . import record as comm_record
from .base import CommOptions


class CommMeasurement(RankSession):
    program = "bench comm"

    def __init__(self, options: CommOptions, base: dict, on_peer_failure=None, on_silence=None):
        super().__init__(base, options.strategy, options.num_ps, options.rendezvous_port, options.rendezvous_timeout,
                         on_peer_failure, on_silence)
        self.options = options
        self.rows: list[dict] = []  # process 0: finished rows
        self.gradients: dict | None = None
        self.placement: list[dict] | None = None  # --strategy ps: variables and bytes per PS
        self.wrong_messages: list[str] = []
        self.lock = threading.Lock()

    @classmethod
    def from_spec(cls, spec: dict, on_peer_failure, on_silence=None) -> CommMeasurement:
        return cls(CommOptions(**{**spec["options"], "ops": tuple(spec["options"]["ops"])}), spec["base"], on_peer_failure,
                   on_silence)

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> dict | None:
        """The record (process 0), or None; Stopped on SIGTERM, with the rows so far kept for finish()."""
        outcome: dict = {}
        with StopScope(Stopped.by):
            returns_within(lambda: outcome.update(record=self._measure()), None)
        return outcome["record"]

    def _measure(self) -> dict | None:
        opts = self.options
        ports = (opts.worker_port, opts.ps_port) if FRAMEWORKS[opts.framework].cluster_ports else None
        dist = self.meet(opts.as_dict(), ports)
        self.backend = backend = load(opts.backend)(opts, dist)
        self.progress(f"{opts.backend} on {opts.framework}: setting up")
        backend.setup()
        if getattr(backend, "serves_only", False):
            self.serve_until_done(dist.role)
            return None
        try:
            for op in opts.ops:
                if op in PsStrategy.comm_ops:
                    self._ps_rows(op)
                else:
                    getattr(self, f"_op_{op}")()
        finally:
            self.close_backend()
        self.leave()
        if self.world.rank != 0:
            return None
        if self.wrong_messages:
            return self.finish("failed", {"kind": "incorrect", "message": "; ".join(self.wrong_messages[:5])})
        return self.finish("ok", None)

    def _timed(self, operation) -> list[float]:
        """Warmup, then each iteration timed on its own: the operation and a device sync only."""
        backend = self.backend
        backend.barrier()
        for _ in range(self.options.warmup_iters):
            operation()
            backend.synchronize()
        times = []
        for _ in range(self.options.iters):
            start = clock()
            operation()
            backend.synchronize()
            times.append(clock() - start)
        return times

    def _add(self, row: dict, wrong: int, what: str) -> None:
        row.update(backend=self.options.backend, wrong=wrong)
        if wrong:
            self.wrong_messages.append(f"{what}: {wrong} wrong elements")
        self.rows.append(row)

    def _gather_row(self, tag: str, times: list[float], wrong: int, what: str, make_row) -> None:
        """Every rank's times and wrong elements to process 0, which adds the row make_row(per-rank times) makes."""
        everyone = self.gather(tag, {"times": times, "wrong": wrong})
        if everyone:
            self._add(make_row([e["times"] for e in everyone]), sum(e["wrong"] for e in everyone), what)

    def _op_allreduce(self) -> None:
        backend, n, rank = self.backend, self.world.size, self.world.rank
        sizes = metrics.message_sizes(self.options.min_bytes, self.options.max_bytes, self.options.step_factor)
        self.progress(f"allreduce: {len(sizes)} sizes, {metrics.format_size(sizes[0])} .. {metrics.format_size(sizes[-1])}")
        for nbytes in sizes:
            elements = nbytes // metrics.ELEMENT_BYTES
            reduced = backend.allreduce(backend.buffer(metrics.pattern(rank, elements)))
            backend.synchronize()
            wrong = metrics.wrong_elements(backend.read(reduced), metrics.expected_sum(n, elements))
            buffer = backend.buffer(np.zeros(elements, dtype=np.float32))  # sums of zeros never overflow
            times = self._timed(lambda: backend.allreduce(buffer))
            self._gather_row(f"allreduce:{nbytes}", times, wrong, f"allreduce {metrics.format_size(nbytes)}",
                             lambda per_rank: {**metrics.timing_row("allreduce", nbytes, per_rank, n), "ranks": n})

    def _op_pingpong(self) -> None:
        backend, n, rank = self.backend, self.world.size, self.world.rank
        if not backend.point_to_point:
            self.progress(f"pingpong: skipped ({self.options.backend} has no point-to-point send/recv)")
            return
        if n < 2:
            self.progress("pingpong: skipped (needs 2 ranks)")
            return
        near, far = 0, n - 1  # the last rank: on another node when there are several
        sizes = metrics.message_sizes(self.options.min_bytes, self.options.max_bytes, self.options.step_factor)
        self.progress(f"pingpong: rank {near} <-> rank {far}, {len(sizes)} sizes")
        for nbytes in sizes:
            elements = nbytes // metrics.ELEMENT_BYTES
            sent = metrics.pattern(near, elements)
            wrong = 0
            if rank == near:
                buffer = backend.buffer(sent)
                backend.send(buffer, far)
                echoed = backend.recv(backend.buffer(np.zeros(elements, dtype=np.float32)), far)
                backend.synchronize()
                wrong = metrics.wrong_elements(backend.read(echoed), sent)

                def round_trip():
                    backend.send(buffer, far)
                    backend.recv(buffer, far)
            elif rank == far:
                buffer = backend.recv(backend.buffer(np.zeros(elements, dtype=np.float32)), near)
                backend.synchronize()
                wrong = metrics.wrong_elements(backend.read(buffer), sent)
                backend.send(buffer, near)

                def round_trip():
                    backend.recv(buffer, near)
                    backend.send(buffer, near)
            else:
                def round_trip():
                    pass
            times = self._timed(round_trip)
            self._gather_row(f"pingpong:{nbytes}", times, wrong, f"pingpong {metrics.format_size(nbytes)}",
                             lambda per_rank: {**metrics.pingpong_row(nbytes, per_rank[near]), "ranks": 2,
                                               "peer": f"{near}<->{far}"})

    def _op_gradients(self) -> None:
        backend, n, rank = self.backend, self.world.size, self.world.rank
        buckets, rule = backend.gradient_buckets(self.options.model)
        total = sum(buckets)
        self.progress(f"gradients: {self.options.model}, {len(buckets)} buckets, {metrics.format_size(total)} "
                 f"({total / 2**20:.1f} MiB)")
        self.gradients = {"model": self.options.model, "rule": rule, "bucket_bytes": buckets, "total_bytes": total}
        counts = [b // metrics.ELEMENT_BYTES for b in buckets]
        reduced = backend.allreduce_many([backend.buffer(metrics.pattern(rank, c)) for c in counts])
        backend.synchronize()
        wrong = sum(metrics.wrong_elements(backend.read(r), metrics.expected_sum(n, c)) for r, c in zip(reduced, counts))
        buffers = [backend.buffer(np.zeros(c, dtype=np.float32)) for c in counts]
        times = self._timed(lambda: backend.allreduce_many(buffers))
        self._gather_row("gradients", times, wrong, f"gradients of {self.options.model}",
                         lambda per_rank: {**metrics.timing_row("gradients", total, per_rank, n), "ranks": n,
                                           "buckets": buckets})

    def _ps_rows(self, op: str) -> None:
        """pull/push: one row per distinct variable size of the model within --min-bytes..--max-bytes
        (its first variable of that size, on the PS that holds it); ps_step: one row, every variable.
        The chief drives every worker (benchmarks.comm.tf_ps_comm); each worker stamps its own."""
        backend, opts = self.backend, self.options
        sizes = backend.variable_sizes()
        workers = backend.num_workers
        if self.gradients is None:
            self.gradients = {"model": opts.model, "rule": backend.rule(), "bucket_bytes": [b for b, _ in sizes],
                              "total_bytes": sum(b for b, _ in sizes)}
            self.placement = backend.placement()
        if op == "ps_step":
            groups = [tuple(range(len(sizes)))]
        else:
            first = {}
            for index, (nbytes, _) in enumerate(sizes):
                if opts.min_bytes <= nbytes <= opts.max_bytes:
                    first.setdefault(nbytes, index)
            groups = [(first[nbytes],) for nbytes in sorted(first)]
        self.progress(f"{op}: {len(groups)} {'step' if op == 'ps_step' else 'variable sizes'}, {workers} worker(s), "
                 f"{opts.num_ps} PS ({opts.ps_placement})")
        for indices in groups:
            wrong = backend.check(op, indices)
            for _ in range(opts.warmup_iters):
                backend.transfer(op, indices)
            per_iteration = [backend.transfer(op, indices) for _ in range(opts.iters)]
            nbytes = sum(sizes[i][0] for i in indices)
            row = metrics.timing_row(op, nbytes, [list(times) for times in zip(*per_iteration)], workers)
            if op == "ps_step":
                row.update(buckets=[sizes[i][0] for i in indices], peer=f"{workers} worker(s) <-> {opts.num_ps} PS")
            else:
                row.update(peer=f"{workers} worker(s) <-> ps {sizes[indices[0]][1]}")
            row["ranks"] = workers
            self._add(row, wrong, f"{op} {metrics.format_size(nbytes)}")

    # -- records ---------------------------------------------------------------------------------

    def finish(self, status: str, error: dict | None) -> dict:
        framework = None
        if self.backend is not None and hasattr(self.backend, "device"):
            try:
                framework = framework_section(self.options.framework, self.backend.version(), self.backend.device_info())
            except Exception:  # noqa: BLE001 - a record without device facts beats no record
                framework = None
        with self.lock:
            rows = list(self.rows)
        return comm_record.build(self.options, self.base, status, error, time.monotonic() - self.started,
                                 self.world_section(), framework, rows, self.gradients, self.placement)


def comm_job(options: CommOptions, base: dict) -> Job:
    """`bench comm` under the supervisor, as a training run: a worker killed (SIGKILL, the OOM killer)
    still ends as a record, made from the options and the launcher's world."""

    def lost(status: str, error: dict, duration_s: float) -> dict:
        world = world_section(worlds.detect(), options.strategy, options.num_ps)
        return comm_record.build(options, base, status, error, duration_s, world)

    spec = {"measurement": "benchmarks.comm.measure:CommMeasurement", "options": dataclasses.asdict(options), "base": base}
    return Job(spec, options.rendezvous_port, lost)
