"""bench's GPU paths on a real CUDA GPU: the memory views, NVML by UUID, float16 loss scaling, TF32 in
effect, a real CUDA out of memory, MFU and energy. Marked `gpu`; without CUDA every test is skipped
loudly (CI has no GPU). perf/gpu_validate.py runs them in call 1 on the lent machine (perf/gpu.md)."""

from __future__ import annotations

import math

import pytest

from infra.helpers import bench, last_json_line, validate_record
from infra.slurm import skip_loudly

pytestmark = pytest.mark.gpu

GIB = 2**30
RUN = ["--framework", "torch", "--device", "gpu", "--model", "resnet50", "--data-format", "channels_last",
       "--display-every", "0", "--json"]


@pytest.fixture(scope="module")
def torch():
    """torch with a CUDA GPU, or a loud skip (imported here, never at collection: CI collects without a GPU)."""
    try:
        import torch
    except ImportError:
        skip_loudly("GPU TESTS NOT RUN: torch is not installed")
    if not torch.cuda.is_available():
        skip_loudly("GPU TESTS NOT RUN: torch sees no CUDA GPU here (they run on the lent GPU machine: perf/gpu.md)")
    return torch


@pytest.fixture(scope="module")
def gpu_uuid(torch):
    import pynvml

    pynvml.nvmlInit()
    uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
    return uuid.decode() if isinstance(uuid, bytes) else uuid


def run_record(*args, env=None) -> dict:
    result = bench(*RUN, *args, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return validate_record(last_json_line(result.stdout))


@pytest.fixture(scope="module")
def long_bf16_record(torch, gpu_uuid) -> dict:
    """One run long enough for NVML's energy counter (seconds of timed loops), on the GPU named by UUID."""
    return run_record("--batch-size", "128", "--precision", "amp-bf16", "--num-warmup-batches", "10",
                      "--num-batches", "100", "--repeats", "2", env={"CUDA_VISIBLE_DEVICES": gpu_uuid})


def test_memory_views_are_ordered_and_measured(long_bf16_record):
    memory = long_bf16_record["memory"]
    assert memory["device_unavailable_reason"] is None
    assert 0 < memory["allocator_peak_bytes"] <= memory["reserved_peak_bytes"] <= memory["device_peak_bytes"]
    assert memory["device_peak_bytes"] <= memory["device_total_bytes"]
    assert memory["allocator_peak_bytes"] > GIB // 2  # ResNet-50 at batch 128 holds gigabytes of activations


def test_nvml_finds_the_gpu_by_uuid_in_process(torch, gpu_uuid):
    """CUDA_VISIBLE_DEVICES=<UUID>: the monitor asks NVML by UUID and sees this process's allocation."""
    from benchmarks.measure import memory

    monitor = memory.DeviceMemoryMonitor((0,), {"CUDA_VISIBLE_DEVICES": gpu_uuid})
    try:
        assert monitor.unavailable_reason is None
        before = monitor.peak_bytes()
        block = torch.empty(2 * GIB, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        monitor.reset()
        assert monitor.peak_bytes() >= before + 2 * GIB - 64 * 2**20
        assert abs(monitor.total_bytes() - torch.cuda.get_device_properties(0).total_memory) < 2 * GIB  # NVML vs CUDA
        del block
        torch.cuda.empty_cache()  # the bench runs after this one see the GPU as they would alone
    finally:
        monitor.close()


def test_a_uuid_nvml_does_not_know_is_a_reason_not_a_crash(torch):
    from benchmarks.measure import memory

    monitor = memory.DeviceMemoryMonitor((0,), {"CUDA_VISIBLE_DEVICES": "GPU-00000000-0000-0000-0000-000000000000"})
    monitor.close()
    assert monitor.peak_bytes() is None and "NVML has no device" in monitor.unavailable_reason


def test_float16_autocast_scales_the_loss(torch):
    record = run_record("--batch-size", "64", "--precision", "amp-fp16", "--num-warmup-batches", "5", "--num-batches", "20")
    section = record["precision"]
    assert section["effective"] == "amp-fp16" and section["autocast_dtype"] == "float16" and section["loss_scaling"]
    assert math.isfinite(record["final_loss"])


def test_loss_scaler_runs_and_stays_finite_in_process(torch):
    """The backend's own GradScaler on the GPU: enabled under amp-fp16, a finite scale after real steps."""
    import itertools

    from benchmarks.frameworks.torch_backend import TorchFramework
    from benchmarks.settings.config import build_config

    config = build_config(framework="torch", model="resnet50", image_size=64, batch_size=8, precision="amp-fp16",
                          device="gpu", synthetic_batches=2)
    backend = TorchFramework(config)
    backend.setup()
    assert backend.scaler.is_enabled()
    batches = itertools.cycle(backend.synthetic_batches())
    losses = [backend.loss_value(backend.train_step(next(batches))) for _ in range(5)]
    assert all(math.isfinite(loss) for loss in losses) and math.isfinite(backend.scaler.get_scale())


def test_tf32_is_in_effect_and_changes_the_arithmetic(torch):
    """The record's tf32_in_effect, and the arithmetic itself: a float32 product through TF32 units
    (10-bit mantissa inputs) is far less exact than one in full float32."""
    from benchmarks.measure import precision

    device = torch.device("cuda", 0)
    a, b = torch.randn(2048, 2048, device=device), torch.randn(2048, 2048, device=device)
    exact = (a.double() @ b.double())

    def error_under(name: str) -> tuple[dict, float]:
        section = precision.apply_torch(precision.plan(name, "gpu"), device)
        return section, float(((a @ b).double() - exact).abs().max() / exact.abs().max())

    on, tf32_error = error_under("tf32")
    off, fp32_error = error_under("fp32")
    if torch.cuda.get_device_capability(device) < (8, 0):
        assert not on["tf32_in_effect"]
        return
    assert on["tf32_in_effect"] and not off["tf32_in_effect"] and not off["tf32_flag"]
    assert tf32_error > 10 * fp32_error, (tf32_error, fp32_error)


def test_a_real_cuda_out_of_memory_is_an_oom_record_and_the_gpu_is_free_after(torch):
    result = bench(*RUN, "--image-size", "448", "--batch-size", "512", "--precision", "fp32",
                   "--num-warmup-batches", "1", "--num-batches", "1")
    assert result.returncode == 3, result.stderr[-3000:]
    record = validate_record(last_json_line(result.stdout))
    assert record["status"] == "oom" and record["error"]["kind"] == "oom"
    assert "memory" in record["error"]["message"].lower()
    again = run_record("--batch-size", "32", "--num-warmup-batches", "2", "--num-batches", "5")
    assert again["status"] == "ok"


def test_the_backend_classifies_a_real_allocation_failure(torch):
    from benchmarks.frameworks.torch_backend import TorchFramework

    total = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(torch.cuda.OutOfMemoryError) as caught:
        torch.empty(2 * total, dtype=torch.uint8, device="cuda")
    assert TorchFramework.is_out_of_memory(object.__new__(TorchFramework), caught.value)


def test_mfu_is_measured_and_plausible(long_bf16_record):
    flops = long_bf16_record["flops"]
    assert flops["math"] == "bf16" and flops["peak_flops_per_sec"] and flops["peak_source"]
    assert flops["mfu"] is not None, flops["mfu_unavailable_reason"]
    assert 0.01 < flops["mfu"] < 0.5


def test_energy_comes_from_nvml_with_a_plausible_power(long_bf16_record):
    energy, record = long_bf16_record["energy"], long_bf16_record
    assert energy["source"] in ("nvml-energy-counter", "nvml-power-sampling"), energy["unavailable_reason"]
    assert energy["scope"] == "gpus" and energy["joules"] > 0
    limit = max(rep["device_state"]["power_limit_w"]["max"] for rep in record["repeats"])
    assert 20 < energy["average_watts"] <= 1.2 * limit
    assert all(rep["joules"] and rep["device_state"]["power_w"] for rep in record["repeats"])


def test_cuda_events_time_the_steps_the_host_waits_for_once(torch):
    """--step-timing events on real CUDA events: one sync at each end, and the steps laid end to end
    from the events add up to the host's time between the two syncs (timing.event_stamps)."""
    from benchmarks.measure import step_timing, timing

    device = torch.device("cuda", 0)
    new_event, section = step_timing.apply_torch("events", device)
    assert section == {"clock": "cuda-events", "cudnn_benchmark": True} and torch.backends.cudnn.benchmark
    a = torch.randn(4096, 4096, device=device)
    syncs = []

    def synchronize():
        syncs.append(1)
        torch.cuda.synchronize(device)

    synchronize()
    began = timing.clock()
    loop = timing.run_steps(iter(range(20)), lambda _: (a @ a).sum(), synchronize, 20, 1, new_event=new_event)
    host = timing.clock() - began
    assert len(syncs) == 3  # the one above, and one at each end of the loop
    assert all(step > 0 for step in loop.step_times_s)
    assert loop.wall_time_s == pytest.approx(sum(loop.step_times_s)) and 0.9 * host < loop.wall_time_s <= host
    step_timing.apply_torch("sync", device)
    assert not torch.backends.cudnn.benchmark
