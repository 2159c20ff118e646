"""Energy and device state: counters that wrap, sums over ranks and hosts, and null with a
reason (never 0) where nothing can measure. NVML itself needs a GPU: its readers are the
small functions below, fed here with the numbers NVML would give."""

from __future__ import annotations

import pytest

from benchmarks.measure import energy
from infra.helpers import SMALL, bench, last_json_line, validate_record


def test_counter_delta_wraps():
    assert energy.counter_delta(100, 250, 1000) == 150
    assert energy.counter_delta(900, 50, 1000) == 150  # wrapped once
    assert energy.counter_delta(2**64 - 10, 5, energy.NVML_COUNTER_WRAP) == 15


def test_rapl_package_domains_wrap_and_subdomains_are_not_counted(tmp_path):
    for name, start, wrap in [("intel-rapl:0", 999_000_000, 1_000_000_000), ("intel-rapl:1", 5_000_000, 1_000_000_000)]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "energy_uj").write_text(f"{start}\n")
        (tmp_path / name / "max_energy_range_uj").write_text(f"{wrap}\n")
    (tmp_path / "intel-rapl:0:0").mkdir()  # the core subdomain: part of package 0
    meter = energy.cpu_meter(tmp_path)
    assert meter.source == "rapl"
    meter.start()
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("1000000\n")  # wrapped: +2 J
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("8000000\n")  # +3 J
    assert meter.stop() == energy.Reading(5.0, "rapl")


def test_no_rapl_is_null_with_reason(tmp_path):
    reading = (meter := energy.cpu_meter(tmp_path / "missing")).stop()
    assert meter.source is None and reading.joules is None and "no RAPL" in reading.reason
    (tmp_path / "intel-rapl:0").mkdir()  # present but unreadable (root-only)
    reading = energy.cpu_meter(tmp_path).stop()
    assert reading.joules is None and "not readable" in reading.reason


def test_gpu_without_nvml_is_null_with_reason():
    reading = energy.gpu_meter(None, None, None).stop()
    assert reading.joules is None and "NVML" in reading.reason


def loops(*readings):
    return [{"energy": r} for r in readings]


def gpu(joules, host="a"):
    return {"joules": joules, "source": energy.NVML_COUNTER, "reason": None, "host": host}


def rapl(joules, host):
    return {"joules": joules, "source": energy.RAPL, "reason": None, "host": host}


def test_sum_over_ranks_and_repeats():
    # 2 ranks x 2 repeats of GPU energy: 10 + 20 + 30 + 40 = 100 J over 4 s of timed loops, 500 images
    section = energy.combine([loops(gpu(10), gpu(20)), loops(gpu(30), gpu(40))], 500, 4.0)
    assert section["joules"] == 100 and section["average_watts"] == 25 and section["images_per_joule"] == 5
    assert section["source"] == "nvml-energy-counter" and section["scope"] == "gpus" and section["unavailable_reason"] is None
    assert energy.repeat_joules([{"energy": gpu(10)}, {"energy": gpu(30)}]) == 40


def test_rapl_counts_each_host_once():
    # ranks 0 and 1 share host a (one package counter read by both), rank 2 is on host b
    per_rank = [loops(rapl(50, "a")), loops(rapl(50, "a")), loops(rapl(70, "b"))]
    assert energy.combine(per_rank, 120, 2.0)["joules"] == 120


@pytest.mark.parametrize("per_rank, reason", [
    ([loops(gpu(10)), loops({"joules": None, "source": None, "reason": "NVML is not usable here", "host": "b"})],
     "rank 1: NVML is not usable here"),
    ([loops(gpu(10)), [{}]], "rank 1: not measured"),
    ([loops(gpu(0))], "did not advance"),  # a counter that did not move: null, never 0
    ([loops(gpu(10)), loops(rapl(5, "b"))], "different sources"),
])
def test_unknown_is_null_with_reason_never_zero(per_rank, reason):
    section = energy.combine(per_rank, 100, 1.0)
    assert section["joules"] is None and section["images_per_joule"] is None and section["average_watts"] is None
    assert reason in section["unavailable_reason"]


def test_power_sampling_fallback_and_device_state_ranges():
    ranges = energy.Ranges()
    for t, watts, temp in [(0.0, 100.0, 60), (1.0, 300.0, 64), (2.0, 300.0, 66)]:
        ranges.add(t, {"power_w": watts, "temperature_c": temp, "sm_clock_mhz": 1980 - temp})
    meter = energy.EnergyMeter(energy.NVML_SAMPLING, reset_integral=lambda: None, integrated=ranges.integrated)
    meter.start()
    assert meter.stop() == energy.Reading(200.0 + 300.0, energy.NVML_SAMPLING)  # trapezoids: 200 + 300 J
    state = ranges.snapshot()
    assert state["temperature_c"] == {"min": 60, "max": 66} and state["sm_clock_mhz"] == {"min": 1914, "max": 1920}
    assert state["power_limit_w"] is None  # not reported by this GPU: null, not 0
    merged = energy.merge_states([state, {**state, "temperature_c": {"min": 58, "max": 70}}, None])
    assert merged["temperature_c"] == {"min": 58, "max": 70}
    ranges.reset()
    assert ranges.integrated() is None and ranges.snapshot() is None


def test_nvml_state_skips_what_a_gpu_does_not_report(monkeypatch):
    calls = []

    def unsupported(_):
        calls.append(1)
        raise RuntimeError("NVMLError_NotSupported")

    monkeypatch.setattr(energy, "_nvml_quantities", lambda: {"temperature_c": (lambda h: 61, max),
                                                            "power_limit_w": (unsupported, sum)})
    skip = set()
    assert energy.nvml_state(["gpu0"], skip) == {"temperature_c": 61} and skip == {"power_limit_w"}
    assert energy.nvml_state(["gpu0"], skip) == {"temperature_c": 61} and len(calls) == 1  # not asked again


def test_cpu_record_energy_is_null_with_reason_or_measured():
    result = bench("--framework", "torch", "--model", "alexnet", "--image-size", "64", *SMALL, "--json",
                   "--display-every", "0", "--device", "cpu")  # a CPU run also where a GPU is visible
    assert result.returncode == 0, result.stderr
    record = validate_record(last_json_line(result.stdout))
    section = record["energy"]
    if section["joules"] is None:  # no readable RAPL here: null with the reason, never 0
        assert section["unavailable_reason"] and section["images_per_joule"] is None
        assert all(rep["joules"] is None for rep in record["repeats"])
        assert "energy: n/a (" in result.stderr
    else:
        assert section["source"] == "rapl" and section["joules"] > 0 and section["unavailable_reason"] is None
    assert all(rep["device_state"] is None for rep in record["repeats"])  # no NVML on a CPU run


@pytest.mark.parametrize("has_counter", [True, False])
def test_monitor_thread_feeds_state_and_energy(monkeypatch, has_counter):
    """The NVML memory thread also samples state; the meter uses the counter or, without it, that thread's power."""
    import time

    from benchmarks.measure import memory

    counter = iter(range(0, 10**9, 500))  # mJ: +0.5 J per read
    monkeypatch.setattr(memory, "nvml_handles", lambda devices: (["gpu0"], None))
    monkeypatch.setattr(memory, "nvml_used_bytes", lambda handles: 2**30)
    monkeypatch.setattr(energy, "_nvml_quantities", lambda: {"power_w": (lambda h: 250.0, sum),
                                                            "temperature_c": (lambda h: 70, max)})

    def energy_mj(handles):
        if not has_counter:
            raise RuntimeError("NVMLError_NotSupported")
        return next(counter)

    monkeypatch.setattr(energy, "nvml_energy_mj", energy_mj)
    monitor = memory.DeviceMemoryMonitor((0,), {})
    try:
        meter = monitor.energy_meter()
        assert meter.source == ("nvml-energy-counter" if has_counter else "nvml-power-sampling")
        monitor.begin_repeat()
        meter.start()
        time.sleep(0.2)
        reading = meter.stop()
        state = monitor.repeat_state()
    finally:
        monitor.close()
    if has_counter:
        assert reading.joules == 0.5
    else:  # 250 W for about 0.2 s
        assert 10 < reading.joules < 100
    assert state["power_w"] == {"min": 250.0, "max": 250.0} and state["temperature_c"] == {"min": 70, "max": 70}


def test_gpu_run_without_nvml_is_null_not_cpu_energy(monkeypatch):
    from benchmarks.measure import memory

    monkeypatch.setattr(memory, "nvml_handles", lambda devices: (None, "NVML could not start: NVMLError_LibraryNotFound"))
    monitor = memory.DeviceMemoryMonitor((0,), {})
    reading = monitor.energy_meter().stop()
    assert reading.joules is None and "NVML" in reading.reason and monitor.repeat_state() is None


def test_power_integral_ignores_a_sample_out_of_order():
    ranges = energy.Ranges()
    ranges.add(1.0, {"power_w": 100.0})
    ranges.add(2.0, {"power_w": 100.0})
    ranges.add(1.5, {"power_w": 900.0})  # stamped before the last one by the other thread: range only
    assert ranges.integrated() == 100.0 and ranges.snapshot()["power_w"] == {"min": 100.0, "max": 900.0}


@pytest.mark.parametrize("fails_at", ["start", "stop"])
def test_energy_counter_failing_mid_run_is_null_with_reason(fails_at):
    reads = iter([1000] if fails_at == "stop" else [])

    def read():
        try:
            return next(reads)
        except StopIteration:
            raise RuntimeError("NVMLError_GpuIsLost: GPU is lost") from None

    meter = energy.EnergyMeter(energy.NVML_COUNTER, read, lambda a, b: (b - a) / 1000)
    meter.start()
    reading = meter.stop()
    assert reading.joules is None and reading.source is None
    assert reading.reason == "nvml-energy-counter failed: RuntimeError: NVMLError_GpuIsLost: GPU is lost"
