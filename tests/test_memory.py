import itertools
import sys
import threading

import pytest

from benchmarks.measure import memory


def test_parse_vm_hwm_reads_kilobytes():
    text = "Name:\tpython\nVmPeak:\t 999 kB\nVmHWM:\t  2048 kB\nVmRSS:\t 1024 kB\n"
    assert memory.parse_status_bytes(text, "VmHWM") == 2048 * 1024
    assert memory.parse_status_bytes("Name: x\n", "VmHWM") is None


def test_host_rss_peak_grows_with_allocation_and_resets():
    memory.reset_host_rss_peak()  # earlier tests in this process may have left the peak far above the RSS
    before = memory.host_rss_peak_bytes()
    block = bytearray(64 * 2**20)
    block[::4096] = b"x" * len(block[::4096])  # touch every page
    grown = memory.host_rss_peak_bytes()
    assert grown >= before + 48 * 2**20
    del block
    if memory.reset_host_rss_peak():
        assert memory.host_rss_peak_bytes() < grown


def test_peak_sampler_tracks_max_and_reset():
    values = iter([5, 9, 3] + [1] * 10_000)
    lock = threading.Lock()

    def read():
        with lock:
            return next(values)

    sampler = memory.PeakSampler(read, interval_s=3600)  # manual sampling only
    sampler.sample()
    sampler.sample()
    assert sampler.peak() >= 9
    sampler.reset()
    assert sampler.peak() < 9


def test_peak_sampler_thread_samples_in_background():
    seen = []
    sampler = memory.PeakSampler(lambda: seen.append(1) or len(seen), interval_s=0.001).start()
    while len(seen) < 20:
        pass
    assert sampler.stop() >= 20


def test_cuda_visible_devices_maps_to_nvml_indices():
    assert memory.nvml_devices([0], {"CUDA_VISIBLE_DEVICES": "3,1"}) == [3]
    assert memory.nvml_devices([1], {"CUDA_VISIBLE_DEVICES": "3,1"}) == [1]
    assert memory.nvml_devices([0, 1], {"CUDA_VISIBLE_DEVICES": "3,1"}) == [3, 1]
    assert memory.nvml_devices([0, 1], {}) == [0, 1]
    assert memory.nvml_devices([1], {}) == [1]
    assert memory.nvml_devices([1], {"CUDA_VISIBLE_DEVICES": "GPU-abc, GPU-def"}) == ["GPU-def"]  # by UUID
    assert memory.nvml_devices([0], {"CUDA_VISIBLE_DEVICES": "MIG-0a1b"}) == ["MIG-0a1b"]
    assert memory.nvml_devices([], {"CUDA_VISIBLE_DEVICES": "0"}) == []


@pytest.mark.parametrize("visible, expected", [
    ("0,1,2,3", [0, 1, 2, 3]),
    ("2,0,3,1", [2, 0, 3, 1]),
    ("3,1", [3, 1, 3, 1]),  # 4 ranks on 2 visible GPUs: ranks take turns
    ("1", [1, 1, 1, 1]),
    (None, [0, 1, 2, 3]),
])
def test_each_local_rank_samples_the_gpu_it_trains_on(visible, expected, monkeypatch):
    """Backend (local_rank % visible) -> DeviceInfo.ordinals -> NVML device, for 4 ranks on one node."""
    from types import SimpleNamespace

    from benchmarks.frameworks.base import Framework

    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    count = len(visible.split(",")) if visible else 4
    asked = []
    monkeypatch.setattr(memory, "nvml_handles", lambda devices: (asked.append(list(devices)) or [f"h{d}" for d in devices], None))
    monkeypatch.setattr(memory, "nvml_used_bytes", lambda handles: 0)
    for local_rank in range(4):
        backend = SimpleNamespace(dist=SimpleNamespace(world=SimpleNamespace(local_rank=local_rank)))
        ordinal = Framework.gpu_ordinal(backend, count)
        monitor = memory.DeviceMemoryMonitor((ordinal,), env)
        monitor.close()
    assert asked == [[device] for device in expected]


def test_device_monitor_is_inert_without_gpu():
    monitor = memory.DeviceMemoryMonitor((), {})
    monitor.reset()
    assert monitor.peak_bytes() is None and monitor.total_bytes() is None
    monitor.close()


class FakeNvmlError(Exception):
    """pynvml's errors are NVMLError subclasses whose str() is the driver's message."""


def fake_pynvml(init_error=None, missing=(), used=None):
    """A stand-in for the pynvml module: the failures NVML has on real machines, injected."""
    from types import SimpleNamespace

    def init():
        if init_error:
            raise FakeNvmlError(init_error)

    def handle(device):
        if device in missing:
            raise FakeNvmlError("Not Found")
        return f"h-{device}"

    return SimpleNamespace(nvmlInit=init, nvmlDeviceGetHandleByIndex=handle, nvmlDeviceGetHandleByUUID=handle,
                           nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=used(), total=80 * 2**30))


def test_nvml_that_cannot_start_says_why_in_peak_and_energy(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error="Driver Not Loaded"))
    monitor = memory.DeviceMemoryMonitor((0,), {})
    try:
        assert monitor.peak_bytes() is None and monitor.total_bytes() is None
        assert monitor.unavailable_reason == "NVML could not start: FakeNvmlError: Driver Not Loaded"
        reading = monitor.energy_meter().stop()
        assert reading.joules is None and reading.reason == monitor.unavailable_reason
    finally:
        monitor.close()


def test_a_uuid_nvml_does_not_know_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(missing=("GPU-0bad",)))
    monitor = memory.DeviceMemoryMonitor((0,), {"CUDA_VISIBLE_DEVICES": "GPU-0bad"})
    monitor.close()
    assert monitor.peak_bytes() is None
    assert "NVML has no device 'GPU-0bad' (from CUDA_VISIBLE_DEVICES): FakeNvmlError: Not Found" == monitor.unavailable_reason


def test_nvml_failing_during_the_run_nulls_the_peak_with_the_reason(monkeypatch):
    reads = itertools.count()  # the sampling thread reads too: next() on a count is atomic

    def used():
        if next(reads) >= 2:
            raise FakeNvmlError("GPU is lost")
        return 2**30

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(used=used))
    monitor = memory.DeviceMemoryMonitor((0,), {})
    try:
        for _ in range(3):
            monitor.reset()
        assert monitor.peak_bytes() is None and monitor.total_bytes() is None
        assert monitor.unavailable_reason == "NVML failed during the run: FakeNvmlError: GPU is lost"
    finally:
        monitor.close()


def test_gpu_ordinal_missing_from_visible_devices_is_explained():
    monitor = memory.DeviceMemoryMonitor((1,), {"CUDA_VISIBLE_DEVICES": "0"})
    assert monitor.peak_bytes() is None and "CUDA ordinal(s) [1]" in monitor.unavailable_reason


def test_ranks_merge_keeps_the_reason_of_a_rank_without_device_peak():
    from benchmarks.measure.memory import max_memory

    ok = {"allocator_peak_bytes": 5, "reserved_peak_bytes": 6, "device_peak_bytes": 7, "device_total_bytes": 9,
          "device_unavailable_reason": None, "host_rss_peak_bytes": 1, "host_rss_peak_since": "warmup_end"}
    broken = {**ok, "device_peak_bytes": None, "device_total_bytes": None, "device_unavailable_reason": "NVML failed"}
    merged = max_memory([ok, broken])
    assert merged["device_peak_bytes"] == 7 and merged["device_unavailable_reason"] == "rank 1: NVML failed"
    assert max_memory([ok, ok])["device_unavailable_reason"] is None
