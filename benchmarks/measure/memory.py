"""Peak memory, each kind labelled for what it measures (docs/results.md#memory): the framework
allocator's, PyTorch's reserved, the device's (NVML "used", sampled in a thread: the CUDA context and
other processes included) and the host's RSS high-water mark. All GPU counters are reset after
warmup so they describe steady training.
"""

from __future__ import annotations

import resource
import threading
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

AS_LIMIT_NEAR = 0.8  # fraction of RLIMIT_AS at which a native crash is taken as out of memory
PROC_STATUS = Path("/proc/self/status")
PROC_CLEAR_REFS = Path("/proc/self/clear_refs")


def parse_status_bytes(status_text: str, field: str) -> int | None:
    """A `Field:  N kB` line of /proc/<pid>/status, in bytes."""
    for line in status_text.splitlines():
        if line.startswith(f"{field}:"):
            value, unit = line.split()[1:3]
            assert unit == "kB", unit
            return int(value) * 1024
    return None


def address_space_limit() -> int | None:
    """RLIMIT_AS (`ulimit -v`), which a worker inherits, or None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def gib(value: int) -> str:
    return f"{value / 2**30:.1f} GiB"


def near_address_space_limit(fraction: float) -> str | None:
    """'X GiB of the Y GiB limit' when this process's address-space peak (VmPeak) reached
    `fraction` of RLIMIT_AS (`ulimit -v`); None without a limit, below it, or off Linux."""
    limit = address_space_limit()
    try:
        peak = parse_status_bytes(PROC_STATUS.read_text(), "VmPeak")
    except OSError:
        return None
    if limit is None or peak is None or peak < fraction * limit:
        return None
    return f"{gib(peak)} of the {gib(limit)} limit"


def host_rss_peak_bytes() -> int:
    try:
        peak = parse_status_bytes(PROC_STATUS.read_text(), "VmHWM")
    except OSError:
        peak = None
    if peak is None:  # not Linux: ru_maxrss is kB on Linux, bytes on macOS
        import sys

        scale = 1 if sys.platform == "darwin" else 1024
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    return peak


def reset_host_rss_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where not permitted."""
    try:
        PROC_CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def host_only() -> dict:
    """Memory section of a run that died: only the host peak is still known."""
    return {
        "allocator_peak_bytes": None,
        "reserved_peak_bytes": None,
        "device_peak_bytes": None,
        "device_total_bytes": None,
        "host_rss_peak_bytes": host_rss_peak_bytes(),
        "host_rss_peak_since": "process_start",
    }


class PeakSampler:
    """Polls a reader in a daemon thread and keeps the maximum since the last reset."""

    def __init__(self, read: Callable[[], int], interval_s: float = 0.005):
        self._read = read
        self._interval = interval_s
        self._peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nvml-peak", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self._interval)

    def sample(self) -> None:
        value = self._read()
        with self._lock:
            self._peak = max(self._peak, value)

    def start(self) -> "PeakSampler":
        self._thread.start()
        return self

    def reset(self) -> None:
        with self._lock:
            self._peak = 0
        self.sample()

    def peak(self) -> int:
        self.sample()
        with self._lock:
            return self._peak

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=1)
        return self.peak()


def nvml_handles(devices: Sequence[int | str]) -> tuple[list | None, str | None]:
    """(NVML handles for NVML indices or GPU/MIG UUIDs, None), or (None, why NVML is unusable):
    the reason goes into the record, so a null device peak or energy never goes unexplained."""
    try:
        import pynvml
    except ImportError as error:
        return None, f"NVML: pynvml is not installed ({error})"
    try:
        pynvml.nvmlInit()
    except Exception as error:  # noqa: BLE001 - no driver library, no permission: NVMLError_*
        return None, f"NVML could not start: {nvml_error_text(error)}"
    handles = []
    for device in devices:
        try:
            handles.append(pynvml.nvmlDeviceGetHandleByUUID(device) if isinstance(device, str)
                           else pynvml.nvmlDeviceGetHandleByIndex(device))
        except Exception as error:  # noqa: BLE001 - NVMLError_NotFound, NVMLError_InvalidArgument, ...
            return None, f"NVML has no device {device!r} (from CUDA_VISIBLE_DEVICES): {nvml_error_text(error)}"
    return handles, None


def nvml_error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).strip()[:200] or 'no message'}"


def nvml_used_bytes(handles) -> int:
    import pynvml

    return sum(pynvml.nvmlDeviceGetMemoryInfo(h).used for h in handles)


def nvml_total_bytes(handles) -> int:
    import pynvml

    return sum(pynvml.nvmlDeviceGetMemoryInfo(h).total for h in handles)


def nvml_devices(cuda_ordinals: Sequence[int], env: Mapping[str, str]) -> list[int | str]:
    """The NVML device of each CUDA ordinal this process trains on (DeviceInfo.ordinals): CUDA numbers
    only the GPUs CUDA_VISIBLE_DEVICES lists (NVML indices or GPU-/MIG- UUIDs), in its order."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(cuda_ordinals)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    return [int(entries[k]) if entries[k].isdigit() else entries[k] for k in cuda_ordinals if k < len(entries)]


STATE_INTERVAL_S = 0.05  # temperature, clocks and power move slowly (NVML refreshes power every 20-100 ms)


class DeviceMemoryMonitor:
    """NVML peak for the GPUs this process uses (CUDA ordinals); inert (all None) without one.

    The same thread samples temperature, SM clock, power and power limit (energy.Ranges:
    min/max per repeat, and the power integral the energy fallback uses)."""

    def __init__(self, cuda_ordinals: Sequence[int], env: Mapping[str, str]):
        from .energy import Ranges

        devices = nvml_devices(cuda_ordinals, env)
        self._on_gpu = bool(cuda_ordinals)
        self._handles, self.unavailable_reason = None, None  # the reason: a GPU run's null device peak
        if devices:
            self._handles, self.unavailable_reason = nvml_handles(devices)
        elif self._on_gpu:
            self.unavailable_reason = (f"no NVML device for CUDA ordinal(s) {list(cuda_ordinals)} in "
                                       f"CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r}")
        self.ranges = Ranges()
        self._unsupported: set = set()  # quantities these GPUs do not report
        self._state_at = float("-inf")
        self._sampler = PeakSampler(self._read).start() if self._handles else None

    def _read(self) -> int:
        from .energy import nvml_state

        if self.unavailable_reason is not None:  # NVML failed during the run: the peak is not known
            return 0
        try:
            used = nvml_used_bytes(self._handles)
        except Exception as error:  # noqa: BLE001 - said in the record, not a crash of the run
            self.unavailable_reason = f"NVML failed during the run: {nvml_error_text(error)}"
            return 0
        now = time.monotonic()
        if now - self._state_at >= STATE_INTERVAL_S:  # slow quantities: fewer NVML calls competing with the run
            self._state_at = now
            self.ranges.add(now, nvml_state(self._handles, self._unsupported))
        return used

    def energy_meter(self):
        """This rank's energy.EnergyMeter: NVML on a GPU, RAPL on a CPU, or null with the reason."""
        from . import energy

        if not self._on_gpu:
            return energy.cpu_meter()
        return energy.gpu_meter(self._handles, self.begin_repeat, self._integral_now,  # no NVML: null, not RAPL
                                self.unavailable_reason)

    def begin_repeat(self) -> None:
        self.ranges.reset()
        self._sample_state_now()

    def _sample_state_now(self) -> None:
        """A state sample now (the ends of a timed loop), not at the thread's next slow tick."""
        if self._sampler is not None:
            self._state_at = float("-inf")
            self._sampler.sample()

    def _integral_now(self) -> float | None:
        self._sample_state_now()
        return self.ranges.integrated()

    def repeat_state(self) -> dict | None:
        """Min/max of each sampled quantity since begin_repeat; None without NVML."""
        if self._sampler is None:
            return None
        self._sampler.sample()
        return self.ranges.snapshot()

    def reset(self) -> None:
        if self._sampler:
            self._sampler.reset()

    def peak_bytes(self) -> int | None:
        if self._sampler is None:
            return None
        peak = self._sampler.peak()
        return None if self.unavailable_reason is not None else peak

    def total_bytes(self) -> int | None:
        if not self._handles or self.unavailable_reason is not None:
            return None
        try:
            return nvml_total_bytes(self._handles)
        except Exception as error:  # noqa: BLE001 - any NVML error: the total stays null with why
            self.unavailable_reason = f"NVML failed reading the total: {nvml_error_text(error)}"
            return None

    def close(self) -> None:
        if self._sampler:
            self._sampler.stop()


def memory_peaks(backend, monitor: DeviceMemoryMonitor, rss_since: str) -> dict:
    """This rank's memory section: the framework allocator's, the device's and the host's peaks."""
    peaks = backend.peak_memory()
    return {
        "allocator_peak_bytes": peaks.allocated,
        "reserved_peak_bytes": peaks.reserved,
        "device_peak_bytes": monitor.peak_bytes(),
        "device_total_bytes": monitor.total_bytes(),
        "device_unavailable_reason": monitor.unavailable_reason,  # read last: the two above may set it
        "host_rss_peak_bytes": host_rss_peak_bytes(),
        "host_rss_peak_since": rss_since,
    }


def max_memory(memories: list[dict]) -> dict:
    """Per field, the largest peak over ranks: the memory a node must provide per process."""
    merged = dict(memories[0])
    for field in merged:
        values = [m[field] for m in memories if isinstance(m[field], int)]
        if values:
            merged[field] = max(values)
    reasons = [(rank, m["device_unavailable_reason"]) for rank, m in enumerate(memories) if m.get("device_unavailable_reason")]
    if reasons:  # one rank without a device peak: its reason stands beside the others' maximum
        merged["device_unavailable_reason"] = f"rank {reasons[0][0]}: {reasons[0][1]}"
    if any(m["host_rss_peak_since"] == "process_start" for m in memories):
        merged["host_rss_peak_since"] = "process_start"
    return merged


