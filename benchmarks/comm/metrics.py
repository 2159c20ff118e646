"""Message sizes and bandwidths, defined as nccl-tests (and NetPIPE, for point-to-point) define
them: docs/comm.md, "Definitions"."""

from __future__ import annotations

from typing import Sequence

from ..measure.stats import Stats

GB = 1e9
ELEMENT_BYTES = 4  # float32 buffers, as nccl-tests' default (-d float)

ALLREDUCE_OPS = ("allreduce", "gradients")  # gradients: the model's buckets, all-reduced back to back


def format_size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def message_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """min, min*f, min*f^2, ... up to max, each a whole number of elements (at least one)."""
    if factor < 2:
        raise ValueError("the step factor must be 2 or more")
    sizes, size = [], max(min_bytes, ELEMENT_BYTES)
    while size <= max_bytes:
        sizes.append(size - size % ELEMENT_BYTES)
        size *= factor
    return sizes


def bus_factor(op: str, ranks: int) -> float:
    """busbw / algbw: 2(n-1)/n for all-reduce; 1 for point-to-point and PS push/pull."""
    if op in ALLREDUCE_OPS:
        return 2 * (ranks - 1) / ranks
    return 1.0


def timing_row(op: str, nbytes: int, per_rank_times: Sequence[Sequence[float]], ranks: int) -> dict:
    """One table row from every participating rank's per-iteration times.

    time_s is nccl-tests' default (the per-rank mean iteration time, averaged over ranks);
    time_stats_s pools every iteration of every rank.
    """
    means = [sum(times) / len(times) for times in per_rank_times]
    time_s = sum(means) / len(means)
    algbw = nbytes / time_s / GB
    factor = bus_factor(op, ranks)
    return {
        "op": op,
        "bytes": nbytes,
        "elements": nbytes // ELEMENT_BYTES,
        "iterations": len(per_rank_times[0]),
        "time_s": time_s,
        "time_stats_s": Stats.of([t for times in per_rank_times for t in times]).as_dict(),
        "algbw_gbps": algbw,
        "bus_factor": factor,
        "busbw_gbps": algbw * factor,
    }


def pingpong_row(nbytes: int, round_trips: Sequence[float]) -> dict:
    """NetPIPE: one-way time = round trip / 2; bandwidth = bytes / one-way time."""
    one_way = [t / 2 for t in round_trips]
    row = timing_row("pingpong", nbytes, [one_way], 2)
    row["latency_us"] = row["time_s"] * 1e6
    return row


def expected_sum(ranks: int, elements: int):
    """What every rank must hold after a sum all-reduce of pattern(rank, elements) over `ranks`."""
    import numpy as np

    return ranks * (ranks + 1) / 2 + ranks * (np.arange(elements) % 7)


def pattern(rank: int, elements: int):
    """Rank-dependent, position-dependent, exact in float32: catches lost, doubled and shifted chunks."""
    import numpy as np

    return (rank + 1 + np.arange(elements) % 7).astype(np.float32)


def wrong_elements(values, expected) -> int:
    import numpy as np

    return int(np.count_nonzero(np.asarray(values, dtype=np.float64) != expected))


DDP_FIRST_BUCKET_BYTES = 1024 * 1024  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
DDP_BUCKET_BYTES = 25 * 1024 * 1024  # DistributedDataParallel(bucket_cap_mb=25), the default


def buckets_by_size(gradient_bytes: Sequence[int], first_limit: int, limit: int) -> list[int]:
    """Gradients in production order, packed as DDP packs them: a bucket closes once it reaches
    its limit (the first bucket's limit is smaller so communication starts early)."""
    buckets, current = [], 0
    for size in gradient_bytes:
        current += size
        if current >= (first_limit if not buckets else limit):
            buckets.append(current)
            current = 0
    if current:
        buckets.append(current)
    return buckets
