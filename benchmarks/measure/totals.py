"""Totals over ranks: what one run measured, from every rank's own timed loops.

Per repeat, all images over the slowest rank's wall time, never rank 0's rate times N: a rank that
waits for a straggler is still measured, and the straggler's own row (rank_rows) says who it was.
Used by the throughput measurement and the time-to-accuracy run alike, so both total the same way.
"""

from __future__ import annotations

import socket

from . import energy, stats, timing


def loop_payload(loop: timing.TimedLoop) -> dict:
    return {
        "images": loop.images,
        "wall_time_s": loop.wall_time_s,
        "step_times_s": loop.step_times_s,
        "input_wait_s": loop.input_wait_s,
    }


def timed_payload(loop: timing.TimedLoop) -> dict:
    """loop_payload, and each worker's where one process timed the steps of several (timing.merge_loops: the chief of
    --strategy ps), which a stopped run totals per worker (Measurement._kept_totals)."""
    payload = loop_payload(loop)
    if loop.per_worker is not None:
        payload["per_worker"] = {worker: loop_payload(steps) for worker, steps in loop.per_worker.items()}
    return payload


def _pooled(loops: list[dict], key: str) -> list[float]:
    return [t for loop in loops for t in loop[key]]


def aggregate(per_rank: list[list[dict]], batch_size: int) -> dict:
    """Totals over ranks: per repeat, all images / the slowest rank's wall time, never rank 0 x N.
    `per_rank[k][r]` is rank k's loop_payload for repeat r."""
    repeats = []
    for r in range(len(per_rank[0])):
        loops = [rank_loops[r] for rank_loops in per_rank]
        waits = _pooled(loops, "input_wait_s")
        images = sum(loop["images"] for loop in loops)
        wall = max(loop["wall_time_s"] for loop in loops)
        repeats.append(
            {
                "index": r,
                "images": images,
                "wall_time_s": wall,
                "images_per_sec": images / wall,
                "step_time_s": stats.Stats.of(_pooled(loops, "step_times_s")).as_dict(),
                "input_wait_s": stats.Stats.of(waits).as_dict(),
                "input_wait_fraction": sum(waits) / sum(loop["wall_time_s"] for loop in loops),
                "joules": energy.repeat_joules(loops),
                "device_state": energy.merge_states([loop.get("device_state") for loop in loops]),
            }
        )
    rates = [rep["images_per_sec"] for rep in repeats]
    every = [loop for rank_loops in per_rank for loop in rank_loops]
    if len(repeats) > 1:
        halfwidth, method = stats.t_halfwidth(rates), "t-interval over repeats"
    else:
        halfwidth = stats.throughput_halfwidth_from_steps(_pooled(every, "step_times_s"), batch_size * len(per_rank))
        method = "delta method on step times" if halfwidth is not None else None
    return {
        "throughput": {
            "images_per_sec": sum(rates) / len(rates),
            "ci95_halfwidth": halfwidth,
            "ci_method": method,
            "total_images": sum(rep["images"] for rep in repeats),
            "total_wall_time_s": sum(rep["wall_time_s"] for rep in repeats),
        },
        "step_time_s": stats.Stats.of(_pooled(every, "step_times_s")).as_dict(),
        "input_wait_s": stats.Stats.of(_pooled(every, "input_wait_s")).as_dict(),
        "repeats": repeats,
    }


def rank_rows(per_rank: list[list[dict]], ranks: list[int], peers: list[dict],
              ceilings: list | None = None) -> list[dict]:
    """Per training rank: its images, time, step-time summary and its device's ceiling (the straggler's facts)."""
    rows = []
    for index, (rank, loops) in enumerate(zip(ranks, per_rank)):
        probed = ceilings[index] if ceilings else None
        images = sum(loop["images"] for loop in loops)
        wall = sum(loop["wall_time_s"] for loop in loops)
        peer = peers[rank] if rank < len(peers) else {}
        rows.append(
            {
                "rank": rank,
                "host": peer.get("host", socket.gethostname()),
                "role": peer.get("role", {"kind": "worker", "index": rank})["kind"],
                "images": images,
                "wall_time_s": wall,
                "images_per_sec": images / wall,
                "step_time_s": stats.Stats.of(_pooled(loops, "step_times_s")).as_dict(),
                "ceiling_flops_per_sec": (probed or {}).get("flops_per_sec"),
            }
        )
    return rows
