"""Time-to-accuracy bookkeeping, framework-free: when to evaluate, when to stop, what the curve says,
by MLPerf Training's rules (docs/accuracy.md, "Timing rules").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

CONVERGED, NOT_CONVERGED, STOPPED = "converged", "not_converged", "stopped"
OUTCOMES = (CONVERGED, NOT_CONVERGED, STOPPED)  # stopped: from outside (a signal, --timeout) before either


@dataclass(frozen=True)
class Point:
    samples: int  # training images seen so far, all workers
    epoch: float  # samples / training-set size
    wall_time_s: float  # since the clock started (first dataset read), evaluation included
    val_accuracy: float
    val_loss: float
    train_loss: float | None  # mean training loss since the previous point (this process's batches)
    lr: float  # the LR of the last update before this point

    def as_dict(self) -> dict:
        return asdict(self)


def eval_total(shards: list[dict]) -> tuple[float, float]:
    """(accuracy, mean loss) over disjoint shards, each {"correct", "loss_sum", "images"}: sums of
    counts, never a mean of means."""
    images = sum(s["images"] for s in shards)
    return sum(s["correct"] for s in shards) / images, sum(s["loss_sum"] for s in shards) / images


@dataclass(frozen=True)
class Budget:
    target: float
    eval_every: int  # samples
    max_epochs: float
    time_s: float | None
    train_images: int  # one epoch

    def next_eval(self, samples: int) -> int:
        """The first evaluation point after `samples`: the next multiple of eval_every, or the end of the
        epoch budget when that comes first (the last evaluation is at the budget, not past it)."""
        end = math.ceil(self.max_epochs * self.train_images)
        return min((samples // self.eval_every + 1) * self.eval_every, max(end, samples + 1))

    def outcome(self, point: Point) -> str | None:
        """converged, not_converged (a budget is spent), or None: train on."""
        if point.val_accuracy >= self.target:
            return CONVERGED
        if point.epoch >= self.max_epochs or (self.time_s is not None and point.wall_time_s >= self.time_s):
            return NOT_CONVERGED
        return None


def summary(curve: list[dict], target: float, stopped: bool = False) -> dict:
    """The record's result fields from the curve alone (so reports can recompute them for another target); `stopped`:
    the run was stopped from outside, its curve so far."""
    hit = next((point for point in curve if point["val_accuracy"] >= target), None)  # the time and samples to target
    best = max(curve, key=lambda point: point["val_accuracy"]) if curve else None
    return {
        "outcome": CONVERGED if hit else STOPPED if stopped else NOT_CONVERGED,
        "samples_to_target": hit["samples"] if hit else None,
        "epochs_to_target": hit["epoch"] if hit else None,
        "time_to_target_s": hit["wall_time_s"] if hit else None,
        "best_accuracy": best["val_accuracy"] if best else None,
        "best_at_samples": best["samples"] if best else None,
    }
