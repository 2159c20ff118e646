"""The record models of the headroom ladder: the measured GEMM ceiling and the best public result (1.19), the bare
loop's harness ratio (1.20).

Apart from record.py only to keep each file small; record.ResultRecord holds them (docs/results.md#headroom).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from .pathrecord import _Model


class GemmRate(_Model):
    n: int = Field(description="the GEMM's side: C (n x n) = A (n x n) @ B (n x n)")
    flops_per_sec: float = Field(description="median of the timed trials at this size, 2 n^3 FLOPs per GEMM")


class CeilingInfo(_Model):
    flops_per_sec: Optional[float] = Field(
        description="the best size's sustained rate: maximum achievable FLOP/s of one device in `math`; null when the "
        "probe failed")
    best_size: Optional[int] = Field(default=None, description="the size that reached it")
    sizes: list[GemmRate] = Field(default_factory=list, description="every size probed, smallest first")
    measured_utc: Optional[str] = Field(
        default=None, description="when the probe ran (this run, or the run that filled the cache)")
    source: Optional[Literal["measured", "cached"]] = Field(
        default=None, description="measured in this run, or read from the cache")
    probe_s: Optional[float] = Field(default=None, description="seconds this run spent probing (0 when cached)")
    key: Optional[str] = Field(
        default=None, description="the cache key: device, framework and version, math, CPU threads")
    math: Optional[Literal["fp32", "tf32", "fp16", "bf16"]] = Field(
        default=None, description="the GEMM's dtype: the run's matmul math (flops.math_in_effect)")
    threads: Optional[int] = Field(default=None, description="the framework's intra-op threads on a CPU; null on a GPU")
    cache_file: Optional[str] = Field(default=None, description="where the cache lives (outside the clone)")
    unavailable_reason: Optional[str] = Field(default=None, description="why flops_per_sec is null")


class AnchorInfo(_Model):
    images_per_sec: Optional[float] = Field(
        description="the best public result per device for this model and device (benchmarks/measure/anchors.py); null: no "
        "anchor")
    source: Optional[str] = Field(description="where it was published")
    conditions: Optional[str] = Field(description="what it ran under (image size, precision, division)")
    fraction: Optional[float] = Field(
        description="this run's images/sec per device / images_per_sec; null when no anchor or the run is outside its "
        "conditions")
    reason: Optional[str] = Field(
        description="why fraction is null: 'no anchor for ...', or the condition the run does not meet")


class ReferencePair(_Model):
    bench_images_per_sec: float = Field(description="this repeat's images/sec (repeats[].images_per_sec)")
    bare_images_per_sec: float = Field(description="the bare loop's images/sec beside it, the same number of steps")
    ratio: float = Field(description="bench_images_per_sec / bare_images_per_sec")


class ReferenceInfo(_Model):
    ratio: Optional[float] = Field(
        description="the harness ratio: bench's images/sec / the bare hand-written loop's on the same machine and "
        "process, the mean of the per-pair ratios (--reference); null: not measured (reason)")
    ci95_halfwidth: Optional[float] = Field(
        description="half-width of the 95% t-interval of the mean ratio over the pairs; null below 2 pairs")
    pairs: int = Field(description="repeats with a bare loop beside them (0 when none ran)")
    bare_images_per_sec: Optional[float] = Field(description="the bare loop's images/sec, mean over the pairs")
    per_pair: list[ReferencePair] = Field(description="each pair in repeat order; the bare loop ran first in odd ones")
    reason: Optional[str] = Field(
        description="why ratio is null (no --reference, several processes, the bare loop failed), or why there are "
        "fewer pairs than repeats")
