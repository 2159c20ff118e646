"""Learning-rate scaling rules for time-to-accuracy runs (--lr-rule), one formula each, with linear
warmup from the base LR (Goyal et al. 2017) and LARS in apex's LARC clip form (docs/accuracy.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

RULES = ("none", "linear", "sqrt", "lars")
DEFAULT_RULE = "none"
WARMUP_BY_DEFAULT = ("linear", "lars")  # rules whose default warmup is DEFAULT_WARMUP_EPOCHS
DEFAULT_WARMUP_EPOCHS = 1.0
LARS_ETA = 0.02  # apex LARC's default trust coefficient
LARS_EPSILON = 1e-8


def scale(rule: str, global_batch: int, base_batch: int) -> float:
    """Peak LR / base LR."""
    ratio = global_batch / base_batch
    if rule == "none":
        return 1.0
    if rule == "sqrt":
        return math.sqrt(ratio)
    return ratio  # linear, and LARS's global rate


@dataclass(frozen=True)
class Schedule:
    rule: str
    base_lr: float
    base_batch: int
    global_batch: int
    warmup_samples: int

    @property
    def peak_lr(self) -> float:
        return self.base_lr * scale(self.rule, self.global_batch, self.base_batch)

    def lr(self, samples: int) -> float:
        """The LR of the update that starts after `samples` training images (all workers)."""
        if self.warmup_samples <= 0 or samples >= self.warmup_samples or self.peak_lr <= self.base_lr:
            return self.peak_lr
        return self.base_lr + (self.peak_lr - self.base_lr) * samples / self.warmup_samples

    def as_dict(self) -> dict:
        return {"rule": self.rule, "base_lr": self.base_lr, "base_batch": self.base_batch,
                "global_batch": self.global_batch, "peak_lr": self.peak_lr, "warmup_samples": self.warmup_samples,
                "lars_eta": LARS_ETA if self.rule == "lars" else None}


def warmup_epochs(rule: str, asked: float | None) -> float:
    """--warmup-epochs as given, else the rule's default."""
    if asked is not None:
        return asked
    return DEFAULT_WARMUP_EPOCHS if rule in WARMUP_BY_DEFAULT else 0.0


def schedule(rule: str, base_lr: float, base_batch: int, global_batch: int, warmup_epochs_asked: float | None,
             train_images: int) -> Schedule:
    return Schedule(rule, base_lr, base_batch, global_batch,
                    int(round(warmup_epochs(rule, warmup_epochs_asked) * train_images)))


def lars_factor(weight_norm, grad_norm, lr, minimum, where):
    """The factor a layer's gradient is multiplied by (LARC clip): min(eta |w| / (|g| lr), 1); 1 where
    either norm is zero. Plain arithmetic plus the framework's `minimum` and `where`, so torch and
    TensorFlow apply this one formula to their own tensors."""
    trust = LARS_ETA * weight_norm / (grad_norm * lr + LARS_EPSILON)
    return where((weight_norm > 0) & (grad_norm > 0), minimum(trust, 1.0), 1.0)


def lars_applies(shape) -> bool:
    """LARS adapts weight matrices and kernels; biases and BatchNorm's scale and shift keep the global LR."""
    return len(shape) > 1
