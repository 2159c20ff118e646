"""A time-to-accuracy run (bench --target-accuracy): train on labelled data until the validation
accuracy reaches the target, under MLPerf Training's timing rules (docs/accuracy.md).

The measurement is Measurement's (meeting the ranks, failures, the record); only the part between
setup and the record differs. Every rank evaluates its own shard and gets every rank's counts back
through dlbench's rendezvous, so all take the same stop decision and none waits in a collective for a
rank that already stopped.

A run stopped from outside (a signal, --timeout) keeps its curve so far and the training steps of its finished
blocks (outcome `stopped`): a run of one process in its own record (finish), one of several through each rank's
steps (kept_so_far: rank_steps), process 0's with the section.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..data import labelled
from ..frameworks import capabilities
from ..measure import memory, stats, timing
from ..measure.memory import memory_peaks
from ..measure.totals import aggregate, loop_payload, rank_rows
from ..results import tensorboard
from ..tta import convergence, lr_rules
from .measurement import Measurement

EVAL_BATCH = 500  # validation images per forward pass at most


@dataclass
class SoFar:
    """What the run has done so far, as far as its record holds it: the whole run's at its end, a stopped run's."""
    data: labelled.LabelledData
    budget: convergence.Budget
    schedule: lr_rules.Schedule
    per_update: int  # images behind one update
    init_time_s: float
    started: float  # the run's clock (timing.clock) at the first dataset read
    segments: list = field(default_factory=list)  # the training blocks between evaluations (timing.TimedLoop)
    curve: list = field(default_factory=list)
    eval_time_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)  # a stopped rank reads it from another thread


class AccuracyMeasurement(Measurement):
    so_far: SoFar | None = None

    def _measure(self, monitor: memory.DeviceMemoryMonitor) -> dict | None:
        cfg = self.config
        backend = capabilities.of(self.backend, capabilities.TrainsToAccuracy,  # _evaluate's too
                                  f"{self.backend.name} has no time-to-accuracy input")
        workers = max(1, self._num_workers())
        global_batch = cfg.batch_size * workers
        per_update = global_batch if self.strategy.synchronous else cfg.batch_size
        # Under a strategy whose chief drives the workers, the chief deals every batch and evaluates alone.
        rank, shards = (0, 1) if self.strategy.gathers_at_chief else (self.world.rank, workers)
        self.mllog.end("init_stop")
        self.mllog.event("global_batch_size", global_batch)
        self.mllog.start("run_start")
        started, started_unix = timing.clock(), time.time()  # MLPerf: the clock starts at the first dataset read
        init_time_s = time.monotonic() - self.started
        data = labelled.load(cfg, frozenset(backend.skip_images))
        budget = convergence.Budget(cfg.target_accuracy, cfg.eval_every or max(1, len(data.train) // 4),
                                    cfg.max_epochs, cfg.time_budget, len(data.train))
        schedule = lr_rules.schedule(cfg.lr_rule, cfg.base_lr, cfg.base_batch, global_batch, cfg.warmup_epochs,
                                     len(data.train))
        self.so_far = so_far = SoFar(data, budget, schedule, per_update, init_time_s, started)
        self.mllog.event("opt_base_learning_rate", schedule.peak_lr)
        self.mllog.dataset(len(data.train), len(data.val))
        indices = labelled.train_batches(len(data.train), cfg.batch_size, rank, shards, cfg.seed)

        def batches():
            for chosen in indices:
                images, labels = data.train.get(chosen)
                yield backend.labelled_batch(data.prepare(images, cfg.image_size), labels)

        stream = batches()
        trained, lr_now = 0, None  # images trained so far (all workers), the LR last set

        def before_update():
            nonlocal trained, lr_now
            lr = schedule.lr(trained)
            if lr != lr_now:  # only when it changes: the first step and warmup
                backend.set_learning_rate(lr)
                lr_now = lr
            trained += per_update

        segments, curve, outcome = so_far.segments, so_far.curve, None
        while outcome is None:
            updates = -(-(budget.next_eval(trained) - trained) // per_update)  # to the first boundary at/after it
            first_epoch = trained / len(data.train)
            self.mllog.start("block_start", first_epoch_num=first_epoch, epoch_count=updates * per_update / len(data.train))
            loop = backend.labelled_loop(stream, updates, before_update)
            self.mllog.end("block_stop", first_epoch_num=first_epoch)
            with so_far.lock:
                segments.append(loop)
            train_loss = sum(backend.loss_value(loss) for loss in loop.losses) / len(loop.losses)
            evaluated = timing.clock()
            self.mllog.start("eval_start", epoch_num=trained / len(data.train))
            shard = self._evaluate(data, rank, shards)
            self.mllog.end("eval_stop", epoch_num=trained / len(data.train))
            so_far.eval_time_s += timing.clock() - evaluated
            # One gather per evaluation, its own tag (the rendezvous keeps every tag's values): everyone's
            # counts, and process 0's clock for everyone.
            gathered = self._gather(f"eval-{len(curve)}", {**shard, "elapsed": timing.clock() - started,
                                                           "train_loss": train_loss, "samples": trained})
            if len({g["samples"] for g in gathered}) > 1:  # would split the stop decision and hang the ranks
                raise RuntimeError(f"ranks evaluated at different points: {[g['samples'] for g in gathered]} samples")
            accuracy, val_loss = convergence.eval_total(gathered)
            point = convergence.Point(trained, trained / len(data.train), gathered[0]["elapsed"], accuracy, val_loss,
                                      sum(g["train_loss"] for g in gathered) / len(gathered), lr_now)
            with so_far.lock:
                curve.append(point.as_dict())
            self.mllog.event("eval_accuracy", accuracy, epoch_num=point.epoch, samples=trained)
            if self.world.rank == 0:  # one voice per run
                self.progress(f"{trained} samples (epoch {point.epoch:.2f}, {point.wall_time_s:.1f} s): validation accuracy "
                              f"{accuracy:.4f}, loss {val_loss:.4f}; training loss {point.train_loss:.4f}; LR {lr_now:g}")
            outcome = budget.outcome(point)
        self.mllog.end("run_stop", status="success" if outcome == convergence.CONVERGED else "aborted")
        run_time_s = timing.clock() - started
        mine = {"memory": memory_peaks(backend, monitor, "process_start"), "checksum": backend.parameter_checksum()}
        if self.strategy.gathers_at_chief:  # the chief timed every worker: one loop each, one copy of the weights
            per_rank, ranks = self._chief_loops(segments)
            everyone = [mine]
        else:
            everyone = self._gather("result", {**mine, "loop": loop_payload(all_segments(segments))})
            if self.world.rank != 0:
                return None
            per_rank = [[{**peer["loop"], "energy": None, "device_state": None}] for peer in everyone]
            ranks = list(range(len(everyone)))
        totals = aggregate(per_rank, cfg.batch_size)
        section = self._section(so_far, totals["throughput"]["images_per_sec"], run_time_s)
        if self.tensorboard is not None:
            self._write_events(tensorboard.write_curve, self.tensorboard, curve, started_unix)
        return self.finish_ok(totals, per_rank, ranks, everyone, curve[-1]["train_loss"], accuracy=section)

    @staticmethod
    def _chief_loops(segments: list) -> tuple[list[list[dict]], list[int]]:
        """Where the chief timed every worker (timing.merge_loops' per_worker): each worker's steps over the blocks as
        one loop, and the workers' ranks."""
        workers = sorted({w for s in segments for w in s.per_worker})
        return ([[{**loop_payload(all_segments(s.per_worker[w] for s in segments if w in s.per_worker)),
                   "energy": None, "device_state": None}] for w in workers], [1 + w for w in workers])

    def _section(self, so_far: SoFar, train_images_per_sec: float, run_time_s: float, stopped: bool = False) -> dict:
        cfg = self.config
        return {
            "target": cfg.target_accuracy,
            **convergence.summary(so_far.curve, cfg.target_accuracy, stopped),
            "budget": {"max_epochs": cfg.max_epochs, "time_s": cfg.time_budget},
            "eval_every_samples": so_far.budget.eval_every,
            "dataset": so_far.data.as_dict(cfg.image_size),
            "lr": {**so_far.schedule.as_dict(), "warmup_epochs": lr_rules.warmup_epochs(cfg.lr_rule, cfg.warmup_epochs),
                   "per_update_batch": so_far.per_update,
                   "staleness": stats.Stats.of(self.backend.staleness).as_dict() if self.backend.staleness else None},
            "init_time_s": so_far.init_time_s,
            "run_time_s": run_time_s,
            "eval_time_s": so_far.eval_time_s,
            "train_images_per_sec": train_images_per_sec,
            "curve": list(so_far.curve),
        }

    def kept_so_far(self) -> dict:
        """A stopped rank's training steps (its finished blocks, as one loop) and, on process 0, the accuracy section
        of the curve so far (rank_steps totals the steps; the section's training rate is theirs)."""
        if self.so_far is None:
            return super().kept_so_far()
        with self.so_far.lock:
            segments, curve = list(self.so_far.segments), list(self.so_far.curve)
        loops = [{**loop_payload(all_segments(segments)), "energy": None, "device_state": None}] if segments else []
        if self.world.rank != 0 or not curve:
            return {"loops": loops, "sections": {}}
        return {"loops": loops, "sections": {"accuracy": self._section(self.so_far, 0.0, timing.clock() - self.so_far.started,
                                                                       stopped=True)}}

    def finish(self, status: str, error: dict | None, **result) -> dict:
        """A run whose process timed every step (a run of one; the chief of --strategy ps: Strategy.measures_alone),
        stopped from outside, keeps its curve and its finished blocks' training rate."""
        if (status in ("interrupted", "timeout") and "accuracy" not in result
                and self.strategy.measures_alone(self.world.rank, self.world.size)):
            kept = self.kept_so_far()
            if kept["sections"]:
                totals = self._stopped_totals(kept["loops"])
                rate = totals["throughput"]["images_per_sec"] if totals else 0.0
                result = {**totals, "accuracy": {**kept["sections"]["accuracy"], "train_images_per_sec": rate}, **result}
        return super().finish(status, error, **result)

    def _stopped_totals(self, loops: list[dict]) -> dict:
        """The finished blocks' totals: this process's loop; the chief's, each worker's, with a row per worker."""
        if not loops:
            return {}
        if not self.strategy.gathers_at_chief:
            return aggregate([loops], self.config.batch_size)
        with self.so_far.lock:
            per_rank, ranks = self._chief_loops(list(self.so_far.segments))
        return {**aggregate(per_rank, self.config.batch_size), "ranks": rank_rows(per_rank, ranks, self.peers)}

    def _evaluate(self, data: labelled.LabelledData, rank: int, workers: int) -> dict:
        """This rank's disjoint shard of the validation set: counts, never a mean (convergence.eval_total).
        Every rank runs as many forward passes as the others (the largest shard's batches, split
        evenly): under a sharded strategy each one is a collective."""
        mine = labelled.shard(len(data.val), rank, workers)
        passes = max(1, -(-len(labelled.shard(len(data.val), 0, workers)) // EVAL_BATCH))  # shard 0 is the largest
        correct, loss_sum = 0, 0.0
        for chosen in np.array_split(mine, passes):
            images, labels = data.val.get(chosen)
            right, loss = self.backend.evaluate(self.backend.labelled_batch(data.prepare(images, self.config.image_size), labels))
            correct, loss_sum = correct + right, loss_sum + loss
        return {"correct": correct, "loss_sum": loss_sum, "images": int(len(mine))}

    def _gather(self, tag: str, value) -> list:
        """Every training rank's value (the chief's alone where it drives the workers)."""
        if self.rendezvous is None or self.strategy.gathers_at_chief:
            return [value]
        return self.rendezvous.allgather(tag, value)


def all_segments(segments) -> timing.TimedLoop:
    """One rank's training segments (between evaluations) as one loop: all its images and steps."""
    segments = list(segments)
    return timing.TimedLoop(images=sum(s.images for s in segments), wall_time_s=sum(s.wall_time_s for s in segments),
                            step_times_s=[t for s in segments for t in s.step_times_s],
                            input_wait_s=[t for s in segments for t in s.input_wait_s], last_loss=segments[-1].last_loss)
