"""Energy of the timed loops, and the GPU's thermal state while they ran: the record's `energy`
section and `repeats[].device_state`.

Sources, best first: NVML's total-energy counter, read at the two ends of each timed loop (which
synchronises the device at both); NVML power samples of the memory monitor's thread, integrated;
on a CPU, RAPL package counters (whole packages: each host counted once). Where none exists the
fields are null with the reason, never 0 (docs/results.md#energy).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

POWERCAP = Path("/sys/class/powercap")
NVML_COUNTER = "nvml-energy-counter"
NVML_SAMPLING = "nvml-power-sampling"
RAPL = "rapl"
SCOPE = {NVML_COUNTER: "gpus", NVML_SAMPLING: "gpus", RAPL: "cpu-packages"}  # RAPL: per host, not per rank
NVML_COUNTER_WRAP = 2**64  # unsigned long long millijoules


def counter_delta(start: int, end: int, wrap: int) -> int:
    """end - start of a counter that wraps to 0 after wrap - 1 (at most once per interval)."""
    return end - start if end >= start else end + wrap - start


@dataclass
class Reading:
    """One loop's energy: joules, or None and why."""

    joules: float | None
    source: str | None
    reason: str | None = None


# -- readers -------------------------------------------------------------------------------------


class RaplCounter:
    """Package energy in µJ, each domain wrapping at its max_energy_range_uj."""

    def __init__(self, root: Path = POWERCAP):
        # Top-level package domains, intel-rapl:N (their subdomains intel-rapl:N:M are parts of them).
        self.domains = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
        self.reason = None
        if not self.domains:
            self.reason = f"no RAPL package counters under {root} (not an Intel/AMD host, or not exposed here)"
            return
        try:
            self.ranges = [int((d / "max_energy_range_uj").read_text()) for d in self.domains]
            self.read()
        except (OSError, ValueError) as error:
            why = getattr(error, "strerror", None) or error
            self.reason = f"RAPL counters under {root} are not readable ({why}; root-only since Linux 5.10)"

    def read(self) -> list[int]:
        return [int((d / "energy_uj").read_text()) for d in self.domains]

    def joules(self, start: list[int], end: list[int]) -> float:
        return sum(counter_delta(a, b, wrap) for a, b, wrap in zip(start, end, self.ranges)) / 1e6


def nvml_energy_mj(handles) -> int:
    import pynvml

    return sum(pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in handles)


def _nvml_quantities():
    import pynvml

    return {
        "temperature_c": (lambda h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU), max),
        "sm_clock_mhz": (lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM), min),
        "power_limit_w": (lambda h: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000, sum),
        "power_w": (lambda h: pynvml.nvmlDeviceGetPowerUsage(h) / 1000, sum),
    }


def nvml_state(handles, skip: set) -> dict[str, float]:
    """What the NVML thread samples besides memory, over this rank's GPUs: the hottest, the slowest
    SM clock, power and power limits summed. A quantity a GPU does not report is added to `skip`."""
    values = {}
    for name, (read, over) in _nvml_quantities().items():
        if name in skip:
            continue
        try:
            values[name] = over(read(h) for h in handles)
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported: that quantity stays null
            skip.add(name)
    return values


# -- one rank's meter ----------------------------------------------------------------------------


class EnergyMeter:
    """start() before a timed loop, stop() after it: a Reading, from a cumulative counter (`read_counter`,
    `to_joules(start, end)`) or else the joules a sampling thread integrated since `reset_integral`."""

    def __init__(self, source: str | None, read_counter: Callable | None = None, to_joules: Callable | None = None,
                 reset_integral: Callable[[], None] | None = None, integrated: Callable[[], float | None] | None = None,
                 reason: str | None = None):
        self.source, self.reason = source, reason
        self._read, self._to_joules = read_counter, to_joules
        self._reset, self._integrated = reset_integral, integrated
        self._start, self._failed = None, None

    def start(self) -> None:
        self._start, self._failed = None, None
        if self._read is not None:
            try:
                self._start = self._read()
            except Exception as error:  # noqa: BLE001 - an NVML error mid-run: null with why, not a crash
                self._failed = error
        elif self._reset is not None:
            self._reset()

    def stop(self) -> Reading:
        if self.source is None:
            return Reading(None, None, self.reason)
        if self._read is not None:
            try:
                if self._failed is not None:
                    raise self._failed
                return Reading(self._to_joules(self._start, self._read()), self.source)
            except Exception as error:  # noqa: BLE001 - any reading failure: energy is null with why, the run stands
                return Reading(None, None, f"{self.source} failed: {type(error).__name__}: {str(error)[:200]}")
        joules = self._integrated()
        if joules is None:
            return Reading(None, None, "no power samples during the loop")
        return Reading(joules, self.source)


def cpu_meter(root: Path = POWERCAP) -> EnergyMeter:
    rapl = RaplCounter(root)
    if rapl.reason:
        return EnergyMeter(None, reason=rapl.reason)
    return EnergyMeter(RAPL, rapl.read, rapl.joules)


def gpu_meter(handles, reset_integral, integrated, reason: str | None = None) -> EnergyMeter:
    """The NVML counter where every GPU has it, else power sampling; no NVML: null with the reason
    NVML gave (memory.nvml_handles)."""
    if not handles:
        return EnergyMeter(None, reason=reason or "NVML is not usable here (no driver library or no permission)")
    try:
        nvml_energy_mj(handles)
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported before Volta: sample power instead
        return EnergyMeter(NVML_SAMPLING, reset_integral=reset_integral, integrated=integrated)
    return EnergyMeter(NVML_COUNTER, lambda: nvml_energy_mj(handles),
                       lambda a, b: counter_delta(a, b, NVML_COUNTER_WRAP) / 1000)


# -- over ranks ----------------------------------------------------------------------------------


def combine(per_rank: Sequence[Sequence[dict]], images: float, wall_time_s: float) -> dict:
    """The record's `energy` section from every rank's loop payloads, each with its Reading as a
    dict under "energy" (and the rank's "host"): summed over repeats and ranks (repeat_joules).
    One rank without a reading makes the total unknown: null with that rank's reason."""
    for rank, loops in enumerate(per_rank):
        for loop in loops:
            reading = loop.get("energy")
            if reading is None:
                return section(None, None, images, wall_time_s, f"rank {rank}: not measured (the chief times this strategy's "
                                                                f"workers)")
            if reading["joules"] is None:
                return section(None, None, images, wall_time_s, f"rank {rank}: {reading['reason']}")
    sources = {loop["energy"]["source"] for loops in per_rank for loop in loops}
    if len(sources) != 1:
        return section(None, None, images, wall_time_s, f"ranks measured with different sources ({', '.join(sorted(sources))})")
    total = sum(repeat_joules(loops) for loops in zip(*per_rank))
    return section(total, sources.pop(), images, wall_time_s, None)


def repeat_joules(loops: Sequence[dict]) -> float | None:
    """One repeat over ranks (RAPL once per host); None unless every rank has a reading."""
    readings = [loop.get("energy") for loop in loops]
    if not readings or any(r is None or r["joules"] is None for r in readings):
        return None
    per_host = {}
    total = 0.0
    for reading in readings:
        if reading["source"] == RAPL:
            per_host[reading.get("host")] = reading["joules"]
        else:
            total += reading["joules"]
    return total + sum(per_host.values())


def section(joules: float | None, source: str | None, images: float, wall_time_s: float, reason: str | None) -> dict:
    known = joules is not None and joules > 0
    return {
        "source": source if known else None,
        "scope": SCOPE[source] if known else None,
        "joules": joules if known else None,
        "average_watts": joules / wall_time_s if known and wall_time_s > 0 else None,
        "images_per_joule": images / joules if known else None,
        "unavailable_reason": None if known else (reason or "the counter did not advance during the timed loops"),
    }


# -- device state per repeat ---------------------------------------------------------------------


class Ranges:
    """Min/max per sampled quantity since reset, and the trapezoid integral of `power_w` (J).
    Fed by the NVML thread (values from nvml_state, or a test), read at repeat boundaries."""

    def __init__(self):
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.low: dict[str, float] = {}
            self.high: dict[str, float] = {}
            self.joules = 0.0
            self.samples = 0
            self._last: tuple[float, float] | None = None

    def add(self, t: float, values: dict[str, float]) -> None:
        with self._lock:
            for name, value in values.items():
                self.low[name] = min(value, self.low.get(name, value))
                self.high[name] = max(value, self.high.get(name, value))
            power = values.get("power_w")
            if power is not None and (self._last is None or t > self._last[0]):  # two threads may sample
                if self._last is not None:
                    t0, p0 = self._last
                    self.joules += (t - t0) * (p0 + power) / 2
                self._last = (t, power)
                self.samples += 1

    def integrated(self) -> float | None:
        with self._lock:
            return self.joules if self.samples >= 2 else None

    def snapshot(self) -> dict | None:
        with self._lock:
            if not self.low:
                return None
            return {name: ({"min": self.low[name], "max": self.high[name]} if name in self.low else None)
                    for name in STATE_FIELDS}


STATE_FIELDS = ("temperature_c", "sm_clock_mhz", "power_limit_w", "power_w")


def merge_states(states: Sequence[dict | None]) -> dict | None:
    """One repeat's device state over ranks: the widest range (coolest min, hottest max)."""
    known = [s for s in states if s]
    if not known:
        return None
    merged = {}
    for name in STATE_FIELDS:
        ranges = [s[name] for s in known if s.get(name)]
        merged[name] = ({"min": min(r["min"] for r in ranges), "max": max(r["max"] for r in ranges)}
                        if ranges else None)
    return merged
