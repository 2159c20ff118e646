"""The measured ceiling: the best matrix-multiply rate this device sustains, in the run's math.

A datasheet peak is a number no real kernel reaches (an H100's dense BF16 989 TFLOP/s; a large bf16
matmul measures about 800), and a CPU has none at all. What a model's FLOP/s should be held against is
what the machine *can* do: a square GEMM (C = A @ B, row-major, no transposes: the layout of a
GEMM is fixed, a convolution's NCHW/NHWC does not apply) at a few sizes, each timed back to back for
a while after a warm-up, on the framework's own threads and in the dtype the run's matmuls use
(TF32 as the run set it). A size's rate is the median of its trials (sustained, not a lucky burst);
the ceiling is the best size's. That is "maximum achievable FLOP/s".

The probe runs after the timed loops (never inside them) and is cached outside the clone, keyed on
the device, the framework and its version, the math and the threads, so the next run on this machine
costs nothing (`--ceiling cached`, the default); `measure` probes again and replaces the entry, `off`
skips it. Ranks sharing a host take the cache's lock in turn, so their probes never overlap.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

MODES = ("off", "cached", "measure")
DEFAULT_MODE = "cached"
TRIALS = 5  # timed trials per size; the median is the size's sustained rate
TRIAL_S = 0.1  # each trial runs back-to-back GEMMs for about this long
SIZES = {"cpu": (256, 512, 1024, 2048), "gpu": (2048, 4096, 8192, 16384)}
CACHE_FILE = "ceiling.json"

# make(n) allocates two n x n operands, runs one untimed GEMM and returns run(reps) -> seconds for `reps`
# GEMMs, the device synchronised at both ends (frameworks/gemm.py).
GemmFactory = Callable[[int], Callable[[int], float]]


def cache_dir(environ=os.environ) -> Path:
    """$XDG_CACHE_HOME/dlbench, else ~/.cache/dlbench: never inside the clone."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dlbench"


@dataclass(frozen=True)
class Key:
    """What the ceiling depends on; two runs with the same key reach the same ceiling."""

    device_kind: str
    device_name: str
    framework: str
    framework_version: str
    math: str
    threads: int | None  # the framework's intra-op threads on a CPU; None on a GPU

    def text(self) -> str:
        threads = f" threads={self.threads}" if self.threads else ""
        return f"{self.device_name} | {self.framework} {self.framework_version} | {self.math}{threads}"


def gemm_flops(n: int) -> float:
    return 2.0 * n**3


def rate_of_size(run: Callable[[int], float], n: int, trials: int = TRIALS, trial_s: float = TRIAL_S) -> float:
    """The median FLOP/s of `trials` trials, each enough GEMMs back to back for about trial_s seconds."""
    reps, seconds = 1, run(1)
    while seconds < trial_s / 2 and reps < 1 << 16:  # calibrate: double until a trial lasts long enough
        reps *= 2
        seconds = run(reps)
    rates = [gemm_flops(n) * reps / run(reps) for _ in range(trials)]
    return statistics.median(rates)


def probe(make: GemmFactory, sizes: tuple[int, ...], trials: int = TRIALS, trial_s: float = TRIAL_S) -> dict:
    """Each size's sustained rate and the best: {"flops_per_sec", "best_size", "sizes": [{"n", "flops_per_sec"}]}."""
    rows = []
    for n in sizes:
        try:
            rows.append({"n": n, "flops_per_sec": rate_of_size(make(n), n, trials, trial_s)})
        except MemoryError:
            break  # larger sizes will not fit either
    if not rows:
        raise RuntimeError(f"no GEMM size in {sizes} could run")
    best = max(rows, key=lambda row: row["flops_per_sec"])
    return {"flops_per_sec": best["flops_per_sec"], "best_size": best["n"], "sizes": rows}


@contextlib.contextmanager
def locked(path: Path):
    """The cache file's lock: one probe per host at a time, and whole reads and writes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read(path: Path) -> dict:
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def ceiling(mode: str, key: Key, make: GemmFactory, sizes: tuple[int, ...], directory: Path | None = None,
            clock=time.monotonic) -> dict | None:
    """The record's `ceiling` (section) for `key`: cached, or probed now and cached; None when off."""
    if mode == "off":
        return None
    path = (directory or cache_dir()) / CACHE_FILE
    with locked(path):
        entries = _read(path)
        entry = entries.get(key.text())
        source, spent = "cached", 0.0
        if entry is None or mode == "measure":
            started = clock()
            entry = {**probe(make, sizes), "measured_utc": _utc_now()}
            source, spent = "measured", clock() - started
            entries[key.text()] = entry
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(entries, indent=1, sort_keys=True))
            tmp.replace(path)
    return {**entry, "source": source, "probe_s": spent, "key": key.text(), "math": key.math,
            "threads": key.threads, "cache_file": str(path)}


def unavailable(reason: str) -> dict:
    """A ceiling that could not be had (the probe failed): the reason, no number."""
    return {"flops_per_sec": None, "unavailable_reason": reason}


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
