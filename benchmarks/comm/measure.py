"""One `bench comm` run: meet the other ranks, then per operation and message size check the
result once, warm up, and time each iteration; gather every rank's times on process 0.

A timed region holds only the operation and the device synchronisation after it: buffers
are made, filled and checked outside it, and ranks line up (barrier) before each loop.
The measurement runs in a thread so that Ctrl-C, SIGTERM and --timeout are handled at once
by the main thread even while a collective blocks in native code; rows measured so far
are kept in the record whatever ends the run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import traceback

import numpy as np

from .. import provenance
from ..distributed import cluster, strategies
from ..distributed import world as worlds
from ..distributed.rendezvous import DONE, Rendezvous, report_failure
from ..errors import EXIT_CODE_BY_STATUS, UsageError
from ..frameworks.base import Distributed
from ..timing import clock
from . import load, metrics
from . import record as comm_record
from .base import CommBackend, CommOptions


def progress(message: str) -> None:
    print(f"bench comm: {message}", file=sys.stderr, flush=True)


class Stopped(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class CommMeasurement:
    def __init__(self, options: CommOptions, base: dict):
        self.options = options
        self.base = base
        self.world = worlds.World()
        self.peers: list[dict] = []
        self.rendezvous: Rendezvous | None = None
        self.backend: CommBackend | None = None
        self.rows: list[dict] = []  # process 0: finished rows
        self.gradients: dict | None = None
        self.placement: list[dict] | None = None  # --strategy ps: variables and bytes per PS
        self.wrong_messages: list[str] = []
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.finished: dict | None = None  # the one record, once decided
        self.peer_failure: dict | None = None

    # -- meeting ---------------------------------------------------------------------------------

    def meet(self) -> Distributed:
        opts = self.options
        self.world = world = worlds.detect()
        role = cluster.role_of(world, opts.strategy, opts.num_ps)
        me = {"address": cluster.my_address(world), "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
              "role": role.as_dict(), "config": json.dumps(opts.as_dict(), sort_keys=True)}
        coordinator = worlds.coordinator_host(world)
        if world.size > 1:
            progress(f"rank {world.rank}/{world.size}: meeting at {coordinator}:{opts.rendezvous_port}")
            self.rendezvous = Rendezvous(world.rank, world.size, coordinator, opts.rendezvous_port,
                                         opts.rendezvous_timeout, on_failure=self._peer_failed,
                                         run_token=worlds.run_token())
            self.peers = self.rendezvous.allgather("hello", me)
        else:
            self.peers = [me]
        if len({peer["config"] for peer in self.peers}) > 1:
            raise UsageError("ranks were started with different bench comm arguments")
        if opts.framework == "tensorflow":  # before TensorFlow is imported (load() below)
            os.environ["TF_CONFIG"] = json.dumps(cluster.tf_config(self.peers, world.rank, opts.worker_port, opts.ps_port))
        return Distributed(world, role, coordinator, self.peers)

    def _peer_failed(self, message: dict) -> None:
        remote = message["record"] or {}
        self.peer_failure = {"status": remote.get("status", "failed"),
                             "message": f"rank {message['rank']}: {(remote.get('error') or {}).get('message', 'failed')}"}

    def gather(self, tag: str, value) -> list | None:
        """Every rank's value on process 0 (None elsewhere)."""
        if self.rendezvous is None:
            return [value]
        values = self.rendezvous.allgather(tag, value)
        return values if self.world.rank == 0 else None

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> dict | None:
        dist = self.meet()
        self.backend = backend = load(self.options.backend)(self.options, dist)
        progress(f"{self.options.backend} on {self.options.framework}: setting up")
        backend.setup()
        if getattr(backend, "serves_only", False):
            progress(f"{dist.role.kind} {dist.role.index}: serving until the chief finishes")
            self.rendezvous.allgather(DONE, None, wait_forever=True)
            return None
        gathers_at_chief = strategies.get(self.options.strategy).gathers_at_chief
        try:
            for op in self.options.ops:
                getattr(self, f"_op_{op}")()
        finally:
            if self.rendezvous is not None and gathers_at_chief:  # release the serving processes
                self.rendezvous.allgather(DONE, None)
            backend.close()
        if self.rendezvous is not None:
            if not gathers_at_chief:  # the serving processes have gone after "done"
                self.gather("end", None)
            self.rendezvous.close()
        if self.world.rank != 0:
            return None
        if self.wrong_messages:
            return self.finish("failed", {"kind": "incorrect", "message": "; ".join(self.wrong_messages[:5])})
        return self.finish("ok", None)

    def _timed(self, operation, warmup: int | None = None) -> list[float]:
        """Warmup, then each iteration timed on its own: the operation and a device sync only."""
        backend = self.backend
        backend.barrier()
        for _ in range(self.options.warmup_iters if warmup is None else warmup):
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

    def _op_allreduce(self) -> None:
        backend, n, rank = self.backend, self.world.size, self.world.rank
        sizes = metrics.message_sizes(self.options.min_bytes, self.options.max_bytes, self.options.step_factor)
        progress(f"allreduce: {len(sizes)} sizes, {metrics.format_size(sizes[0])} .. {metrics.format_size(sizes[-1])}")
        for nbytes in sizes:
            elements = nbytes // metrics.ELEMENT_BYTES
            reduced = backend.allreduce(backend.buffer(metrics.pattern(rank, elements)))
            backend.synchronize()
            wrong = metrics.wrong_elements(backend.read(reduced), metrics.expected_sum(n, elements))
            buffer = backend.buffer(np.zeros(elements, dtype=np.float32))  # sums of zeros never overflow
            times = self._timed(lambda: backend.allreduce(buffer))
            everyone = self.gather(f"allreduce:{nbytes}", {"times": times, "wrong": wrong})
            if everyone:
                row = metrics.timing_row("allreduce", nbytes, [e["times"] for e in everyone], n)
                row["ranks"] = n
                self._add(row, sum(e["wrong"] for e in everyone), f"allreduce {metrics.format_size(nbytes)}")

    def _op_pingpong(self) -> None:
        backend, n, rank = self.backend, self.world.size, self.world.rank
        if not backend.point_to_point:
            progress(f"pingpong: skipped ({self.options.backend} has no point-to-point send/recv)")
            return
        if n < 2:
            progress("pingpong: skipped (needs 2 ranks)")
            return
        near, far = 0, n - 1  # the last rank: on another node when there are several
        sizes = metrics.message_sizes(self.options.min_bytes, self.options.max_bytes, self.options.step_factor)
        progress(f"pingpong: rank {near} <-> rank {far}, {len(sizes)} sizes")
        for nbytes in sizes:
            elements = nbytes // metrics.ELEMENT_BYTES
            sent = metrics.pattern(near, elements)
            wrong, times = 0, [0.0]
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
            everyone = self.gather(f"pingpong:{nbytes}", {"times": times, "wrong": wrong})
            if everyone:
                row = metrics.pingpong_row(nbytes, everyone[near]["times"])
                row.update(ranks=2, peer=f"{near}<->{far}")
                self._add(row, sum(e["wrong"] for e in everyone), f"pingpong {metrics.format_size(nbytes)}")

    def _op_gradients(self) -> None:
        backend, n, rank = self.backend, self.world.size, self.world.rank
        buckets, rule = backend.gradient_buckets(self.options.model)
        total = sum(buckets)
        progress(f"gradients: {self.options.model}, {len(buckets)} buckets, {metrics.format_size(total)} "
                 f"({total / 2**20:.1f} MiB)")
        self.gradients = {"model": self.options.model, "rule": rule, "bucket_bytes": buckets, "total_bytes": total}
        counts = [b // metrics.ELEMENT_BYTES for b in buckets]
        reduced = backend.allreduce_many([backend.buffer(metrics.pattern(rank, c)) for c in counts])
        backend.synchronize()
        wrong = sum(metrics.wrong_elements(backend.read(r), metrics.expected_sum(n, c)) for r, c in zip(reduced, counts))
        buffers = [backend.buffer(np.zeros(c, dtype=np.float32)) for c in counts]
        times = self._timed(lambda: backend.allreduce_many(buffers))
        everyone = self.gather("gradients", {"times": times, "wrong": wrong})
        if everyone:
            row = metrics.timing_row("gradients", total, [e["times"] for e in everyone], n)
            row.update(ranks=n, buckets=buckets)
            self._add(row, sum(e["wrong"] for e in everyone), f"gradients of {self.options.model}")

    # PS operations: the chief drives every worker (benchmarks.comm.tf_ps_comm); each worker stamps its own.
    def _op_pull(self) -> None:
        self._ps_rows("pull")

    def _op_push(self) -> None:
        self._ps_rows("push")

    def _op_ps_step(self) -> None:
        self._ps_rows("ps_step")

    def _ps_rows(self, op: str) -> None:
        """pull/push: one row per distinct variable size of the model within --min-bytes..--max-bytes
        (its first variable of that size, on the PS that holds it); ps_step: one row, every variable."""
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
        progress(f"{op}: {len(groups)} {'step' if op == 'ps_step' else 'variable sizes'}, {workers} worker(s), "
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

    def world_section(self) -> dict:
        hosts = sorted({peer["host"] for peer in self.peers}) or [socket.gethostname()]
        per_host = [sum(1 for peer in self.peers if peer["host"] == host) for host in hosts]
        workers = strategies.get(self.options.strategy).workers(self.world.size, self.options.num_ps)
        return {"rank": self.world.rank, "processes": self.world.size,
                "workers": workers, "num_ps": self.options.num_ps,
                "strategy": self.options.strategy, "launcher": self.world.launcher, "nodes": len(hosts),
                "processes_per_node": max(per_host or [1]), "hosts": hosts}

    def finish(self, status: str, error: dict | None) -> dict:
        framework = None
        if self.backend is not None and hasattr(self.backend, "device"):
            try:
                device = self.backend.device_info()
                framework = {"name": self.options.framework, "version": self.backend.version(),
                             "device_kind": device.kind, "device_name": device.name, "device_count": device.count,
                             "visible_gpus": device.visible_gpus, "cuda_version": device.cuda_version,
                             "cudnn_version": device.cudnn_version}
            except Exception:  # noqa: BLE001 - a record without device facts beats no record
                framework = None
        with self.lock:
            rows = list(self.rows)
        return comm_record.validate({
            "run_id": self.base["run_id"], "timestamp_utc": self.base["timestamp_utc"], "status": status,
            "error": error, "config": self.options.as_dict(), "world": self.world_section(), "results": rows,
            "gradients": self.gradients, "placement": self.placement, "correct": not self.wrong_messages and status == "ok",
            "duration_s": time.monotonic() - self.started,
            "provenance": {**self.base["provenance"], "framework": framework},
        })


def _raise_stopped(signum, _frame):
    raise Stopped("interrupted", f"stopped by {signal.Signals(signum).name}")


def run_comm(options: CommOptions, base: dict, deliver) -> int:
    """Run it; `deliver(record)` writes and prints process 0's record (an exit code when it could not).
    Returns the exit code."""
    measurement = CommMeasurement(options, base)
    outcome: dict = {}

    def body():
        try:
            outcome["record"] = measurement.run()
        except BaseException as error:  # noqa: BLE001 - every failure becomes a record
            outcome["error"] = error

    thread = threading.Thread(target=body, name="bench-comm", daemon=True)
    previous = {s: signal.signal(s, _raise_stopped) for s in (signal.SIGTERM, signal.SIGINT)}
    deadline = None if options.timeout is None else time.monotonic() + options.timeout
    stopped: Stopped | None = None
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.1)
            if deadline is not None and time.monotonic() > deadline:
                raise Stopped("timeout", f"run exceeded --timeout {options.timeout:g} s")
            if measurement.peer_failure is not None:
                raise Stopped(measurement.peer_failure["status"], measurement.peer_failure["message"])
    except Stopped as stop:
        stopped = stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopped is None and isinstance(outcome.get("error"), UsageError):
        raise outcome["error"]
    if stopped is None and "error" in outcome:
        error = outcome["error"]
        if isinstance(error, Exception):
            from ..worker import first_line

            traceback.print_exception(error)
            stopped = Stopped("failed", first_line(error))
        else:
            stopped = Stopped("interrupted", "interrupted")
    if stopped is not None:
        kind = {"failed": "crash"}.get(stopped.status, stopped.status)
        record = measurement.finish(stopped.status, {"kind": kind, "message": stopped.message})
        progress(f"{stopped.status}: {stopped.message}")
        code = EXIT_CODE_BY_STATUS[stopped.status]
        if measurement.world.rank == 0:
            code = deliver(record) or code
        elif not stopped.message.startswith("rank "):
            try:  # tell process 0, so the run's record says why
                report_failure(worlds.coordinator_host(measurement.world), options.rendezvous_port,
                               measurement.world.rank, record, worlds.run_token())
            except UsageError:
                pass
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # a collective may still block the other thread
    record = outcome.get("record")
    if record is None:
        return 0
    return deliver(record) or EXIT_CODE_BY_STATUS[record["status"]]
