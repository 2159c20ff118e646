"""One benchmark run inside the worker process: meet the other ranks, build, warm up,
time, gather, assemble the record.

This is the only place that sequences a measurement, so every backend and
strategy is measured the same way: warmup excluded, peaks reset after
warmup, the device synchronised at each timing boundary (timing.run_steps),
and multi-rank totals computed from every rank's own loop (totals.aggregate).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from pathlib import Path

from .. import frameworks
from ..core import durable, processes
from ..core.errors import Stopped, UsageError
from ..distributed import strategies
from ..distributed.session import RankSession
from ..frameworks import capabilities
from ..frameworks.base import Framework, framework_section
from ..measure import anchors, ceiling, energy, flops, limits, memory, preflight, timing
from ..measure.totals import aggregate, loop_payload, rank_rows, timed_payload
from ..results import fingerprint, record, tensorboard
from ..results.mllog import MLLogger
from ..settings.config import BenchConfig
from . import reference


def framework_info(backend: Framework) -> dict:
    return framework_section(backend.name, backend.version(), backend.device_info())


class Measurement(RankSession):
    """A training run's measurement; the session (meeting, peer failures, the world) is RankSession's."""

    def __init__(self, config: BenchConfig, base: dict, mllog: MLLogger, on_peer_failure=None,
                 tensorboard: str | None = None, data_scan: dict | None = None, display_every: int = 0,
                 trace: dict | None = None, on_silence=None):
        super().__init__(base, config.strategy, config.num_ps, config.rendezvous_port, config.rendezvous_timeout,
                         on_peer_failure, on_silence)
        self.config = config
        self.mllog = mllog
        self.tensorboard = tensorboard  # directory for per-step scalars, or None
        self.display_every = display_every  # --display-every: a progress line every N steps (0: none)
        self.trace = trace  # --trace: {"dir", "steps"} of the profiled window after the timed loops, or None
        self.data_scan = data_scan  # --data-dir: images found and those set apart as undecodable (dataset.scan_images)
        self.probe: fingerprint.Probe | None = None  # this rank's path, taken after the timed loops
        self.preflight: dict | None = None  # the record's `preflight`, once every rank has checked
        self.timed: list[dict] = []  # this rank's timed loops so far (loop_payload): what a stopped run keeps
        self._repeat: int | None = None  # the timed repeat in progress (its steps are in timing.running), else None
        self._timed_lock = threading.Lock()  # `timed` and `_repeat` change together: kept_so_far reads both

    @classmethod
    def unwinds(cls, spec: dict, world) -> bool:
        """Also the chief of a strategy whose chief times every worker itself (Strategy.measures_alone)."""
        return strategies.get(spec["config"]["strategy"]).measures_alone(world.rank, world.size)

    @classmethod
    def from_spec(cls, spec: dict, on_peer_failure, on_silence=None) -> Measurement:
        """The worker's run, as supervisor.training_job wrote it."""
        mllog = MLLogger(spec["mllog"], sys.stdout, spec.get("mllog_submission"))
        return cls(BenchConfig(**spec["config"]), spec["base"], mllog, on_peer_failure,
                   tensorboard=spec["tensorboard"], data_scan=spec["data_scan"], display_every=spec["display_every"],
                   trace=spec["trace"], on_silence=on_silence)

    # -- the measurement -------------------------------------------------------------------------

    def run(self) -> dict | None:
        """The record (process 0), or None for the other ranks once their part is done."""
        cfg = self.config
        self.mllog.start("init_start")
        self.mllog.run_header()
        dist = self.meet(cfg.as_dict(), (cfg.worker_port, cfg.ps_port) if self.strategy.tf_cluster else None)
        scan = self.data_scan or {"skipped": [], "strict": False}
        self.backend = frameworks.load(cfg.framework, self.strategy)(
            cfg, dist, keep_losses=self.tensorboard is not None, skip_images=frozenset(path for path, _ in scan["skipped"]),
            strict_data=scan["strict"])
        self._preflight()
        self.progress(f"building {cfg.model} on {cfg.framework} ({cfg.data} data, strategy {cfg.strategy})")
        self.backend.setup()
        if self.backend.serves_only:
            self.serve_until_done(dist.role, self._serve_trace if self.trace is not None else None)
            return None
        device = self.backend.device_info()
        monitor = memory.DeviceMemoryMonitor(device.ordinals if device.kind == "gpu" else (), os.environ)
        try:
            result = self._measure(monitor)
        finally:
            monitor.close()
            self.close_backend()
            if self.probe is not None:
                self.probe.close()
        self.leave()
        return result

    def _preflight(self) -> None:
        """Before the model is built: every rank checks what the run needs against its limits (preflight.py)
        and learns every other rank's checks, so that under --strict-preflight all refuse together (exit 2,
        nothing run or written) and none is left waiting; else a failure labels the record and process 0
        says it in one line. The path probe starts here too: NCCL's log is asked for before NCCL starts."""
        cfg, backend, rank = self.config, self.backend, self.world.rank
        gpus = backend.visible_gpus()
        library = backend.collective_library(cfg.device == "gpu" or (cfg.device == "auto" and bool(gpus)))
        self.probe = fingerprint.Probe(rank, self.host, library)
        now = limits.taken(backend.compute_threads(), cfg.num_data_workers if cfg.data_dir else 0)
        local_peers = sum(peer["host"] == self.host for peer in self.peers) - 1
        mine = preflight.checks(rank, now, threads=now["threads"], device=cfg.device, gpus=gpus,
                                data_bytes=backend.shared_memory_for_data(), library=library, local_peers=local_peers)
        every = self.rendezvous.allgather("preflight", mine) if self.rendezvous is not None else [mine]
        self.preflight = preflight.section(every, cfg.strict_preflight)
        if self.preflight["ok"]:
            return
        if cfg.strict_preflight:
            raise UsageError(preflight.line(self.preflight))
        if rank == 0:
            self.progress(preflight.line(self.preflight))

    def _rank_path(self, published: list[dict] | None) -> dict | None:
        """This rank's RankPath after the timed loops; None when the probe itself failed (the run stands)."""
        try:
            cfg = self.config
            return self.probe.take(self.backend.collective(), self.backend.dist.coordinator,
                                   self.backend.device_info().intra_op_threads,
                                   cfg.num_data_workers if cfg.data_dir else 0, published)
        except Exception as error:  # noqa: BLE001 - the measurement stands without its path
            self.progress(f"warning: the path was not probed: {type(error).__name__}: {error}")
            return None

    def _path_section(self, rank_paths: list[dict | None]) -> dict | None:
        return fingerprint.section(rank_paths) if rank_paths and None not in rank_paths else None

    def _measure(self, monitor: memory.DeviceMemoryMonitor) -> dict | None:
        cfg, backend = self.config, self.backend
        batches = backend.batches()
        self.mllog.end("init_stop")
        self.mllog.event("global_batch_size", cfg.batch_size * max(1, self._num_workers()))
        self.mllog.start("run_start")
        if capabilities.compiles(backend):  # never inside warmup or a timed loop
            self.progress("compiling: the first step, timed on its own")
            backend.compile_step(batches)
        if cfg.num_warmup_batches:
            self.progress(f"warmup: {cfg.num_warmup_batches} batches of {cfg.batch_size}")
            backend.timed_loop(batches, cfg.num_warmup_batches, **self._display("warmup", cfg.num_warmup_batches))
        pairs = self._bare_loop()
        processes.retake_stop_signals()  # the framework's setup and first steps may have taken them (TensorFlow's)
        backend.reset_peak_memory()
        monitor.reset()
        rss_reset = memory.reset_host_rss_peak()
        loops = []
        meter = monitor.energy_meter()
        for index in range(cfg.repeats):
            if timing.boundary.requested:  # Slurm's warning (processes.BOUNDARY_SIGNALS): no further repeat
                break
            bare_first = pairs is not None and pairs.bare_first(index)
            if bare_first:
                pairs.time(index)
            self.mllog.start("epoch_start", index, repeat=index)
            monitor.begin_repeat()
            meter.start()  # at the ends of the timed loop, which synchronises the device at both
            timing.running.clear()
            self._repeat = index
            try:
                loop = backend.timed_loop(batches, cfg.num_batches,
                                          **self._display(f"repeat {index + 1}", cfg.num_batches))
            except Stopped as stop:  # a stop now: the steps it had timed are kept (finish)
                if stop.loop is not None:
                    self.timed.append({**timed_payload(stop.loop), "device_state": None,
                                       "energy": {"joules": None, "reason": "the loop was stopped: not read"}})
                raise
            reading = {**dataclasses.asdict(meter.stop()), "host": self.host}
            if not loop.step_times_s:  # the warning came before this loop's first step
                break
            payload = {**timed_payload(loop), "energy": reading, "device_state": monitor.repeat_state()}
            with self._timed_lock:
                self.timed.append(payload)
                self._repeat = None
            loops.append(loop)
            self.mllog.end("epoch_stop", index, repeat=index)
            self.mllog.event("tracked_stats", {"throughput": loop.images_per_sec}, repeat=index)
            if pairs is not None and not bare_first and not timing.boundary.requested:
                pairs.time(index)
            self.progress(f"repeat {index + 1}/{cfg.repeats}: {loop.images_per_sec:.2f} images/sec (this process)"
                          + self._bare_text(pairs, index))
        if not loops:  # the warning came before the first timed step: nothing measured
            raise Stopped("interrupted", self._boundary_message(), timing.boundary.signal)
        local = {
            "loops": self.timed,
            # the peaks first: the checksum's copies of the weights are not the run's memory
            "memory": memory.memory_peaks(backend, monitor, "warmup_end" if rss_reset else "process_start"),
            "checksum": backend.parameter_checksum(),
        }
        # after the memory peaks (the probe's operands are not the run's); not when Slurm's warning stopped the run
        local["ceiling"] = None if timing.boundary.requested else self._ceiling()
        if self.trace is not None and not timing.boundary.requested:  # after the timed loops and the memory peaks
            local["trace"] = self._trace_served(batches) if self.strategy.gathers_at_chief else self._trace(batches)
        if self.strategy.gathers_at_chief:  # the serving processes wait in serve_until_done: the chief's own
            local["path"] = self._rank_path(None)
        else:  # each rank reads a same-node peer's pattern (single-copy, CMA) once all have published theirs
            mine = self.probe.published()
            local["path"] = self._rank_path(self.rendezvous.allgather("path-cma", mine) if self.rendezvous else [mine])
        if self.tensorboard is not None:  # after the timed loops and the memory peaks
            logdir = self.tensorboard if self.world.size == 1 else os.path.join(self.tensorboard, f"rank-{self.world.rank}")
            self._write_events(tensorboard.write_loops, logdir, loops, cfg.batch_size, backend.loss_value)
        if self.strategy.gathers_at_chief:  # the chief measured every worker itself
            workers = sorted(loops[0].per_worker)
            per_rank = [[loop_payload(loop.per_worker[w]) for loop in loops] for w in workers]
            ranks = [1 + w for w in workers]
            everyone = [local]  # one copy of the variables, served to every worker
            traces = local.get("trace")  # one per worker (--trace), in worker order
        else:
            everyone = self.gather("result", local)
            if everyone is None:
                return None
            per_rank = [peer["loops"] for peer in everyone]
            ranks = list(range(len(everyone)))
            traces = [peer.get("trace") for peer in everyone]
        totals = aggregate(per_rank, cfg.batch_size)
        # Each training rank's own probe; where the chief drives the workers only its own device was probed.
        ceilings = [None] * len(ranks) if self.strategy.gathers_at_chief else [peer.get("ceiling") for peer in everyone]
        rate = totals["throughput"]["images_per_sec"]
        sections = {
            "path": self._path_section([peer["path"] for peer in everyone]),
            "flops": self._flops(rate, ceilings),
            "ceiling": local["ceiling"],
            "anchor": self._anchor(rate),
            "reference": (pairs.section([loop.images_per_sec for loop in loops]) if pairs is not None
                          else reference.not_run(self.world.size)),
            "energy": energy.combine(per_rank, totals["throughput"]["total_images"], totals["throughput"]["total_wall_time_s"]),
        }
        if self.trace is not None:
            sections["trace"] = {"dir": str(self._trace_dir()), "steps": self.trace["steps"], "ranks": traces}
        self.mllog.end("run_stop", status="aborted" if timing.boundary.requested else "success")
        return self.finish_ok(totals, per_rank, ranks, everyone, backend.loss_value(loops[-1].last_loss), ceilings,
                              **sections)

    def _kept_totals(self) -> dict:
        """A stopped run's totals over the steps this process timed (Strategy.measures_alone): its own loops; a chief's, each
        worker's loops (a worker without a step in a repeat cut short adds none there), and a row per worker."""
        if not self.strategy.gathers_at_chief:
            return aggregate([self.timed], self.config.batch_size)
        workers = sorted({w for loop in self.timed for w in loop["per_worker"]})
        idle = {"images": 0, "wall_time_s": 0.0, "step_times_s": [], "input_wait_s": []}
        per_rank = [[loop["per_worker"].get(w, idle) for loop in self.timed] for w in workers]
        return {**aggregate(per_rank, self.config.batch_size),
                "ranks": rank_rows(per_rank, [1 + w for w in workers], self.peers)}

    def kept_so_far(self) -> dict:
        """What a rank of several processes keeps when it is stopped (rank_steps.payload), read from another thread
        than the loop's: its timed loops (loop_payload) so far, the steps of the repeat in progress included
        (`loops`), and the record sections only it can give (`sections`: none here)."""
        with self._timed_lock:
            loops, repeat = list(self.timed), self._repeat
        cut = timing.running.steps() if repeat is not None else None
        if cut is not None:
            loops.append({**loop_payload(cut), "device_state": None,
                          "energy": {"joules": None, "reason": "the loop was stopped: not read"}})
        return {"loops": loops, "sections": {}}

    def _trace_dir(self) -> Path:
        return Path(self.trace["dir"], self.peers[0]["run_id"])

    def _trace_file(self) -> Path:
        return self._trace_dir() / f"rank-{self.world.rank}{self.backend.trace_suffix}"

    def _trace(self, batches) -> dict:
        """--trace: K more steps under the framework's profiler; this rank's trace file and summary.
        A profiler failure is reported in the record; the measurement stands."""
        from ..measure import trace

        rank, steps, path = self.world.rank, self.trace["steps"], self._trace_file()
        self.progress(f"tracing {steps} steps after the timed loops: {path}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            capabilities.of(self.backend, capabilities.ProfilesSteps, f"--trace: no step profiler for "
                            f"{self.backend.name} under --strategy {self.config.strategy} in this version"
                            ).profile_steps(batches, steps, path)
            return trace.write_summary(path, rank)
        except Exception as error:  # the timed loops are measured already
            if self.backend.is_out_of_memory(error):
                raise
            failure = trace.failure(error, path, rank)
        self.progress(f"warning: --trace: {failure}")
        return {"rank": rank, "error": failure}

    def _trace_served(self, batches) -> list[dict]:
        """--trace under a strategy whose chief drives the workers (PS; docs/results.md#trace): the chief runs
        K + 1 more steps per worker while each serving process profiles itself. The measurement stands."""
        steps = self.trace["steps"]
        self.progress(f"tracing {steps} steps per worker after the timed loops: {self._trace_dir()}")
        self.rendezvous.allgather("trace-start", None)
        self.rendezvous.allgather("trace-ready", None)
        told: dict = {"stamps": None, "error": None}
        try:
            by_worker, _ = capabilities.of(self.backend, capabilities.DrivesWorkers, f"--strategy "
                                           f"{self.config.strategy} has no chief-driven steps").worker_stamps(batches, steps + 1)
            told["stamps"] = [by_worker.get(worker, []) for worker in range(self._num_workers())]
        except Exception as error:  # the timed loops are measured already
            if self.backend.is_out_of_memory(error):
                raise
            told["error"] = f"{type(error).__name__}: {error}"
            self.progress(f"warning: --trace: {told['error']}")
        self.rendezvous.allgather("trace-stop", told)
        results = self.rendezvous.allgather("trace-result", None)
        workers = sorted((peer["role"]["index"], rank) for rank, peer in enumerate(self.peers)
                         if peer["role"]["kind"] == strategies.WORKER)
        return [results[rank] for _, rank in workers]

    def _serve_trace(self) -> None:
        """A serving process's part of _trace_served: profile between the chief's start and stop;
        a worker then summarises its steps from the chief's stamps of them."""
        from ..measure import trace

        role, rank, path = self.backend.dist.role, self.world.rank, self._trace_file()
        handle, error, summary = None, None, None
        self.rendezvous.allgather("trace-start", None, wait_forever=True)  # the chief's timed loops come first
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = capabilities.of(self.backend, capabilities.ProfilesServing,
                                     f"--trace: {self.backend.name} cannot profile a serving process").start_profiler(path)
        except Exception as failure:  # noqa: BLE001 - reported in the record; the run goes on
            error = f"{type(failure).__name__}: {failure}"
        self.rendezvous.allgather("trace-ready", None)
        told = self.rendezvous.allgather("trace-stop", None, wait_forever=True)[0]
        if handle is not None:
            try:
                self.backend.stop_profiler(handle, path)
                if role.kind == strategies.WORKER:
                    if told["error"]:
                        raise RuntimeError(f"the chief's traced steps failed: {told['error']}")
                    summary = trace.write_summary(path, rank, told["stamps"][role.index])
            except Exception as failure:  # noqa: BLE001 - the timed loops are measured already
                error = trace.failure(failure, path, rank)
        if error is not None:
            self.progress(f"warning: --trace: {error}")
        if role.kind == strategies.WORKER and summary is None:
            summary = {"rank": rank, "error": error}
        self.rendezvous.allgather("trace-result", summary)

    def _ceiling(self) -> dict | None:
        """This rank's measured GEMM ceiling (benchmarks/measure/ceiling.py): cached or probed now, after the timed loops.
        A probe that fails leaves its reason; the measurement stands."""
        framework = framework_info(self.backend)
        kind, math = framework["device_kind"], flops.math_in_effect(self.backend.precision_state)
        key = ceiling.Key(kind, framework["device_name"], framework["name"], framework["version"], math,
                          framework["intra_op_threads"] if kind == "cpu" else None)
        try:
            if self.config.ceiling == "off":
                return None
            self.progress(f"ceiling ({self.config.ceiling}): {key.text()}")
            probe = capabilities.of(self.backend, capabilities.ProbesGemm, f"{self.backend.name} has no GEMM probe")
            return ceiling.ceiling(self.config.ceiling, key, probe.gemm_factory(math), ceiling.SIZES[kind])
        except Exception as error:  # noqa: BLE001 - the timed loops are measured already
            reason = f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
            self.progress(f"warning: no ceiling: {reason}")
            return ceiling.unavailable(reason)

    def _bare_loop(self) -> reference.Interleaved | None:
        """--reference (one process: bench refused more before starting): the bare loop built and warmed up after
        bench's own warmup and before the peaks are reset, so that neither side's warmup is timed."""
        cfg = self.config
        if not cfg.reference or self.world.size > 1:
            return None
        self.progress(f"reference: building the bare loop, {cfg.num_warmup_batches} warmup batches")
        return reference.Interleaved(lambda: reference.for_backend(self.backend, cfg), cfg.num_warmup_batches,
                                     cfg.num_batches, warn=lambda reason: self.progress(f"warning: --reference: {reason}"))

    @staticmethod
    def _bare_text(pairs: reference.Interleaved | None, index: int) -> str:
        """The progress line's bare-loop part for repeat `index`."""
        rate = pairs.bare.get(index) if pairs is not None else None
        return "" if rate is None else f"; bare loop {rate:.2f} images/sec"

    def _achievable(self, ceilings: list) -> tuple[float | None, str | None]:
        """The sum of the training ranks' ceilings (each rank's devices), or why there is none."""
        if self.config.ceiling == "off":
            return None, "--ceiling off"
        if any(probed is None for probed in ceilings):
            return None, "the chief drove the workers: their devices' ceilings were not probed"
        for rank, probed in enumerate(ceilings):
            if probed["flops_per_sec"] is None:
                return None, f"rank {rank}: {probed['unavailable_reason']}"
        return sum(probed["flops_per_sec"] for probed in ceilings) * framework_info(self.backend)["device_count"], None

    def _anchor(self, images_per_sec: float) -> dict:
        framework = framework_info(self.backend)
        return anchors.section(self.config.model, framework["device_kind"], framework["device_name"],
                               self.config.image_size, flops.math_in_effect(self.backend.precision_state),
                               images_per_sec, max(1, self._num_workers()) * framework["device_count"])

    def _flops(self, images_per_sec: float, ceilings: list) -> dict:
        """Counted after the timed loops (never inside one); a count that fails leaves its reason."""
        counted, reason = None, None
        try:
            counted = capabilities.of(self.backend, capabilities.CountsFlops,
                                      f"{self.backend.name} does not count FLOPs").count_flops()
        except Exception as error:  # noqa: BLE001 - the measurement stands without a FLOP count
            reason = f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
            self.progress(f"warning: FLOPs not counted: {reason}")
        framework = framework_info(self.backend)
        return flops.section(counted, reason, self.config.image_size, images_per_sec, framework,
                             max(1, self._num_workers()) * framework["device_count"], self.backend.precision_state,
                             self._achievable(ceilings))

    def _write_events(self, write, logdir: str, *args) -> None:
        """--tensorboard: write(logdir, *args) after the measurement; a failure is said, the measurement stands."""
        try:
            with tensorboard.nothing_half_written(logdir):
                write(logdir, *args)
        except Exception as error:  # noqa: BLE001 - say why there are no events, in one line
            said = str(error) if isinstance(error, durable.NoRoom) else f"{logdir}: {type(error).__name__}: {error}"
            self.progress(f"warning: --tensorboard: {said.splitlines()[0] if said else ''}")

    def _display(self, phase: str, total: int) -> dict:
        """Progress lines for timing.run_steps (process 0 only: one voice per run)."""
        if not self.display_every or self.world.rank != 0:
            return {}
        from ..results.progress import step_line

        def show(step: int, images_per_sec: float, loss) -> None:
            value = self.backend.loss_value(loss) if loss is not None else None
            print(step_line(phase, step, total, images_per_sec, self.display_every, value), file=sys.stderr, flush=True)

        return {"display_every": self.display_every, "display": show}

    def _num_workers(self) -> int:
        return self.strategy.workers(self.world.size, self.config.num_ps)

    # -- records ---------------------------------------------------------------------------------

    def failure(self, status: str, kind: str, message: str) -> dict:
        self.mllog.end("run_stop", status="aborted")
        return super().failure(status, kind, message)

    def _boundary_message(self) -> str:
        cfg, steps = self.config, sum(len(loop["step_times_s"]) for loop in self.timed)
        return (f"stopped at a step boundary by {timing.boundary.signal} (Slurm's pre-timeout warning): "
                f"{steps} of {cfg.repeats * cfg.num_batches} timed steps measured")

    def finish_ok(self, totals: dict, per_rank: list[list[dict]], ranks: list[int], everyone: list[dict],
                  final_loss: float | None, ceilings: list | None = None, **sections) -> dict:
        """A measured run's record from every training rank's loops and its weights' checksum and memory peaks
        (`everyone`: one {"checksum", "memory"} per copy of the weights): `ok`, or `interrupted` with what was
        measured when Slurm's warning stopped it at a step boundary (docs/signals.md: why not `ok`)."""
        checksums = [peer["checksum"] for peer in everyone]
        stopped = timing.boundary.requested
        error = {"kind": "interrupted", "message": self._boundary_message(), "signal": timing.boundary.signal}
        return self.finish(
            "interrupted" if stopped else "ok", error if stopped else None, **totals, **sections,
            memory=memory.max_memory([peer["memory"] for peer in everyone]), final_loss=final_loss,
            ranks=rank_rows(per_rank, ranks, self.peers, ceilings), placement=self.backend.placement(),
            replicas={"checksums": checksums, "in_sync": len(set(checksums)) == 1,
                      "expected_in_sync": self.strategy.syncs_replicas or len(checksums) == 1},
        )

    def finish(self, status: str, error: dict | None, **result) -> dict:
        """The record; a failed run's memory is the host's alone. A run stopped from outside (a signal, --timeout)
        keeps the steps this process had timed, measured over those steps alone (warmup excluded); in a run of
        several processes each rank writes its steps instead (kept_so_far), which process 0's supervisor totals."""
        from ..data.dataset import skipped_section

        if status != "ok":
            result.setdefault("memory", memory.host_only())
        if status in ("interrupted", "timeout") and self.timed and "throughput" not in result \
                and self.strategy.measures_alone(self.world.rank, self.world.size):
            result = {**self._kept_totals(), **result}
        framework, model = None, None
        if self.backend is not None:
            try:
                framework, model = framework_info(self.backend), self.backend.model_info()
            except AttributeError:  # a peer failed while this rank was still building (setup() sets what they read)
                pass
        failures = self.backend.decode_failures if self.backend is not None else []
        sections = self.backend.record_sections() if self.backend is not None else {}
        sections["preflight"] = self.preflight
        return record.build(
            self.config, self.base, status, error, time.monotonic() - self.started,
            framework=framework, model=model, world=self.world_section(),
            data=skipped_section(self.data_scan, failures), **sections, **result,
        )

