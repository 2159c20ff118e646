import threading

from benchmarks import memory


def test_parse_vm_hwm_reads_kilobytes():
    text = "Name:\tpython\nVmPeak:\t 999 kB\nVmHWM:\t  2048 kB\nVmRSS:\t 1024 kB\n"
    assert memory.parse_vm_hwm(text) == 2048 * 1024
    assert memory.parse_vm_hwm("Name: x\n") is None


def test_host_rss_peak_grows_with_allocation_and_resets():
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
    assert memory.cuda_visible_indices(1, {"CUDA_VISIBLE_DEVICES": "3,1"}) == [3]
    assert memory.cuda_visible_indices(2, {"CUDA_VISIBLE_DEVICES": "3,1"}) == [3, 1]
    assert memory.cuda_visible_indices(2, {}) == [0, 1]
    assert memory.cuda_visible_indices(1, {"CUDA_VISIBLE_DEVICES": "GPU-abc"}) == [0]


def test_device_monitor_is_inert_without_gpu():
    monitor = memory.DeviceMemoryMonitor(0, {})
    monitor.reset()
    assert monitor.peak_bytes() is None and monitor.total_bytes() is None
    monitor.close()
