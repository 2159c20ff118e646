"""The one statistics type every backend and report uses.

Throughput is never a mean of per-step rates (that overweights fast steps);
it is images / wall time of the timed loop, as in tf_cnn_benchmarks.
Spread is reported robustly (jitter = 1.4826 x MAD, which equals the standard
deviation for normal data but ignores the occasional GC or I/O hiccup).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class Stats:
    n: int
    mean: float
    median: float
    p90: float
    stdev: float | None  # sample standard deviation (n-1); None when n < 2
    stderr: float | None  # stdev / sqrt(n)
    jitter: float  # 1.4826 * median absolute deviation
    min: float
    max: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> "Stats":
        values = np.asarray(samples, dtype=float)
        if values.size == 0:
            raise ValueError("Stats.of needs at least one sample")
        median = float(np.median(values))
        stdev = float(values.std(ddof=1)) if values.size > 1 else None
        return cls(
            n=int(values.size),
            mean=float(values.mean()),
            median=median,
            p90=float(np.percentile(values, 90)),
            stdev=stdev,
            stderr=stdev / math.sqrt(values.size) if stdev is not None else None,
            jitter=MAD_TO_SIGMA * float(np.median(np.abs(values - median))),
            min=float(values.min()),
            max=float(values.max()),
        )

    def as_dict(self) -> dict:
        return asdict(self)


def t_halfwidth(samples: Sequence[float], confidence: float = 0.95) -> float | None:
    """Half-width of the Student-t confidence interval of the mean; None below 2 samples."""
    values = np.asarray(samples, dtype=float)
    if values.size < 2:
        return None
    from scipy.special import stdtrit  # Student t's quantile, without importing scipy.stats in every bench process

    quantile = float(stdtrit(values.size - 1, 0.5 + confidence / 2))
    return quantile * float(values.std(ddof=1)) / math.sqrt(values.size)


def throughput_halfwidth_from_steps(
    step_times: Sequence[float], images_per_step: int, confidence: float = 0.95
) -> float | None:
    """CI of images/sec from one timed loop (a single repeat), by the delta method on the mean step time:
    X = B / mean(step) so SE(X) ~= B * SE(step) / mean(step)^2."""
    values = np.asarray(step_times, dtype=float)
    half = t_halfwidth(values, confidence)
    if half is None:
        return None
    mean = float(values.mean())
    return images_per_step * half / (mean * mean)


OLYMPIC_MIN = 5  # MLPerf drops the fastest and slowest of at least five runs


def olympic_mean(samples: Sequence[float]) -> float:
    """Mean without the lowest and highest value from OLYMPIC_MIN samples on (MLPerf's scoring of
    repeated runs); below that the plain mean."""
    values = sorted(float(v) for v in samples)
    if not values:
        raise ValueError("olympic_mean needs at least one sample")
    if len(values) >= OLYMPIC_MIN:
        values = values[1:-1]
    return sum(values) / len(values)
