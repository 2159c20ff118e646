import threading

import pytest

from benchmarks import memory


def test_parse_vm_hwm_reads_kilobytes():
    text = "Name:\tpython\nVmPeak:\t 999 kB\nVmHWM:\t  2048 kB\nVmRSS:\t 1024 kB\n"
    assert memory.parse_vm_hwm(text) == 2048 * 1024
    assert memory.parse_vm_hwm("Name: x\n") is None


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
    monkeypatch.setattr(memory, "nvml_handles", lambda devices: asked.append(list(devices)) or [f"h{d}" for d in devices])
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
