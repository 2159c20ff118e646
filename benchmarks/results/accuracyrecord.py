"""The record models of a time-to-accuracy run (1.13): section `accuracy`, its curve, learning-rate rule,
dataset and budget (docs/accuracy.md says what each means and how it is measured).

Apart from record.py only to keep each file small; record.ResultRecord holds them.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from ..tta import convergence, lr_rules
from .pathrecord import StatsRecord, _Model


class CurvePoint(_Model):
    samples: int = Field(description="training images so far, all workers")
    epoch: float = Field(description="samples / training images")
    wall_time_s: float = Field(description="on the run's clock (process 0), from the first dataset read to the end of this "
                                           "evaluation")
    val_accuracy: float = Field(description="correct / images over the whole validation set (shards summed)")
    val_loss: float = Field(description="mean cross-entropy over the validation set")
    train_loss: Optional[float] = Field(description="mean training loss since the previous point, averaged over ranks")
    lr: float = Field(description="the LR of the last update before this point")


class LrInfo(_Model):
    rule: Literal[lr_rules.RULES]
    base_lr: float
    base_batch: int = Field(description="the global batch base_lr is tuned for")
    global_batch: int = Field(description="images per synchronous update: batch_size x workers")
    peak_lr: float = Field(description="base_lr scaled by the rule (lr_rules.scale)")
    warmup_samples: int = Field(description="linear warmup from base_lr to peak_lr over these training images")
    warmup_epochs: float
    lars_eta: Optional[float] = Field(description="LARS trust coefficient (LARC clip form); null unless rule is lars")
    per_update_batch: int = Field(description="images behind one update of the weights")
    staleness: Optional[StatsRecord] = Field(description="updates applied between a step's read of the weights and its own "
                                                         "update (asynchronous strategies); null when synchronous")


class DatasetInfo(_Model):
    name: Literal["fashion-mnist", "imagefolder"]
    path: str
    train_images: int
    val_images: int
    classes: int
    preprocessing: str = Field(description="how images reach the model's input: padding or resizing, grey to RGB, normalisation")


class BudgetInfo(_Model):
    max_epochs: float
    time_s: Optional[float]


class AccuracyInfo(_Model):
    target: float = Field(description="--target-accuracy")
    outcome: Literal[convergence.OUTCOMES] = Field(description="converged: an evaluation reached the target; not_converged: the "
                                                               "budget ended first; stopped: a signal or --timeout ended "
                                                               "the run first, the curve is the evaluations before (1.21)")
    samples_to_target: Optional[int] = Field(description="training images at the first evaluation at or above the target")
    epochs_to_target: Optional[float]
    time_to_target_s: Optional[float] = Field(description="run clock at the end of that evaluation (MLPerf's time to train)")
    best_accuracy: Optional[float] = Field(description="best validation accuracy within the budget")
    best_at_samples: Optional[int]
    budget: BudgetInfo
    eval_every_samples: int
    dataset: DatasetInfo
    lr: LrInfo
    init_time_s: float = Field(description="process start to the clock start: meeting the ranks, building the model (not in the "
                                           "times above)")
    run_time_s: float = Field(description="the whole clock: data read, training, evaluation")
    eval_time_s: float = Field(description="this process's time in evaluation (on the clock)")
    train_images_per_sec: float = Field(description="training images / the slowest rank's time in training steps (evaluation "
                                                    "excluded)")
    curve: list[CurvePoint]
