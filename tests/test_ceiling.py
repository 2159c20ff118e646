"""The headroom ladder: the measured GEMM ceiling (its probe, cache and modes), MFU vs achievable, the
best public result, the table's line, and a real run's record carrying all of them."""

from __future__ import annotations

import json

import pytest

from benchmarks.frameworks import gemm
from benchmarks.measure import anchors, ceiling, flops
from benchmarks.results import output
from infra.helpers import ROOT, SMALL, bench, last_json_line, validate_record

KEY = ceiling.Key("cpu", "Test CPU", "torch", "9.9", "fp32", 2)


def fake_gemm(rates: dict[int, float], calls: list | None = None):
    """A GEMM factory whose size n runs at rates[n] FLOP/s exactly (MemoryError when absent)."""

    def make(n):
        if calls is not None:
            calls.append(n)
        if n not in rates:
            raise MemoryError(f"{n} does not fit")
        return lambda reps: ceiling.gemm_flops(n) * reps / rates[n]

    return make


def test_the_best_size_is_the_ceiling_and_a_size_that_does_not_fit_ends_the_probe():
    calls = []
    found = ceiling.probe(fake_gemm({256: 10e9, 512: 40e9, 1024: 30e9}, calls), (256, 512, 1024, 2048, 4096),
                          trials=3, trial_s=0.01)
    assert found["flops_per_sec"] == pytest.approx(40e9) and found["best_size"] == 512
    assert [row["n"] for row in found["sizes"]] == [256, 512, 1024]
    assert calls == [256, 512, 1024, 2048]  # 4096 not tried after 2048 ran out of memory


def test_a_size_rate_is_the_median_of_its_trials_not_the_luckiest():
    times = iter([1.0, 1.0, 0.5, 1.0, 1.0, 0.25, 2.0])  # calibration, then five trials of one GEMM each

    def run(reps):
        return next(times)

    assert ceiling.rate_of_size(run, 100, trials=5, trial_s=1.0) == pytest.approx(ceiling.gemm_flops(100) / 1.0)


def test_no_size_at_all_is_an_error():
    with pytest.raises(RuntimeError, match="no GEMM size"):
        ceiling.probe(fake_gemm({}), (256,))


def test_cached_measures_once_then_reads_measure_replaces_off_skips(tmp_path):
    calls = []
    first = ceiling.ceiling("cached", KEY, fake_gemm({256: 5e9}, calls), (256,), tmp_path)
    assert first["source"] == "measured" and first["flops_per_sec"] == pytest.approx(5e9) and calls == [256]
    again = ceiling.ceiling("cached", KEY, fake_gemm({256: 9e9}, calls), (256,), tmp_path)
    assert again["source"] == "cached" and again["probe_s"] == 0 and again["flops_per_sec"] == pytest.approx(5e9)
    assert calls == [256]  # no probe: it cost nothing
    fresh = ceiling.ceiling("measure", KEY, fake_gemm({256: 9e9}, calls), (256,), tmp_path)
    assert fresh["source"] == "measured" and fresh["flops_per_sec"] == pytest.approx(9e9)
    assert ceiling.ceiling("cached", KEY, fake_gemm({}), (256,), tmp_path)["flops_per_sec"] == pytest.approx(9e9)
    assert ceiling.ceiling("off", KEY, fake_gemm({}), (256,), tmp_path) is None
    stored = json.loads((tmp_path / ceiling.CACHE_FILE).read_text())
    assert list(stored) == [KEY.text()] and KEY.text() == "Test CPU | torch 9.9 | fp32 threads=2"


def test_every_fact_the_ceiling_depends_on_is_in_its_key(tmp_path):
    ceiling.ceiling("cached", KEY, fake_gemm({256: 5e9}), (256,), tmp_path)
    for other in (ceiling.Key("cpu", "Test CPU", "torch", "9.9", "bf16", 2),  # math
                  ceiling.Key("cpu", "Test CPU", "torch", "9.9", "fp32", 1),  # threads
                  ceiling.Key("cpu", "Test CPU", "torch", "10.0", "fp32", 2),  # version
                  ceiling.Key("cpu", "Test CPU", "tensorflow", "9.9", "fp32", 2),
                  ceiling.Key("gpu", "NVIDIA H100 80GB HBM3", "torch", "9.9", "bf16", None)):
        assert ceiling.ceiling("cached", other, fake_gemm({256: 7e9}), (256,), tmp_path)["source"] == "measured"


def test_the_cache_lives_outside_the_clone(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert ceiling.cache_dir() == tmp_path / "dlbench"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert str(ceiling.cache_dir()).endswith(".cache/dlbench")


@pytest.mark.parametrize("math, dtype", [("fp32", "float32"), ("tf32", "float32"), ("bf16", "bfloat16")])
def test_the_torch_gemm_runs_in_the_run_math(math, dtype):
    """The real probe on this CPU at tiny sizes (the GPU path: the same code on a CUDA device, perf/gpu_validate.py)."""
    torch = pytest.importorskip("torch")
    assert gemm.DTYPES[math] == dtype and gemm.DTYPES["fp16"] == "float16"
    found = ceiling.probe(gemm.torch_factory(torch.device("cpu"), math), (64, 128), trials=3, trial_s=0.01)
    assert found["flops_per_sec"] > 1e6 and found["best_size"] in (64, 128)


def test_gpu_sizes_are_cublas_sized():
    assert min(ceiling.SIZES["gpu"]) >= 2048 and max(ceiling.SIZES["gpu"]) <= 16384


# -- the ladder ---------------------------------------------------------------------------------


def test_mfu_vs_achievable_divides_by_the_summed_ceilings_on_cpus_too():
    counted = flops.Counted(1e9, None, "test")
    cpu = {"device_kind": "cpu", "device_name": "Test CPU"}
    section = flops.section(counted, None, 64, 10.0, cpu, 2, None, (100e9, None))
    assert section["mfu"] is None and section["mfu_vs_achievable"] == pytest.approx(3 * 1e9 * 10 / 100e9)
    off = flops.section(counted, None, 64, 10.0, cpu, 2, None, (None, "--ceiling off"))
    assert off["mfu_vs_achievable"] is None and off["achievable_unavailable_reason"] == "--ceiling off"
    uncounted = flops.section(None, "RuntimeError: x", 64, 10.0, cpu, 2, None, (100e9, None))
    assert uncounted["mfu_vs_achievable"] is None and "no FLOP count" in uncounted["achievable_unavailable_reason"]


H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("model, kind, name, size, math, reason", [
    ("resnet50", "gpu", H100, 224, "bf16", None),
    ("resnet50", "gpu", "NVIDIA H200", 224, "fp16", None),
    ("resnet50", "gpu", H100, 64, "bf16", "at 224 px"),
    ("resnet50", "gpu", H100, 224, "fp32", "this run fp32"),
    ("alexnet", "gpu", H100, 224, "bf16", "no anchor for alexnet"),
    ("resnet50", "gpu", "NVIDIA GeForce RTX 4090", 224, "bf16", "no anchor"),
    ("resnet50", "cpu", "Intel(R) Xeon(R)", 224, "fp32", "no anchor"),
])
def test_an_anchor_holds_only_for_its_device_model_and_conditions(model, kind, name, size, math, reason):
    section = anchors.section(model, kind, name, size, math, 2 * 3725.0, 2)
    if reason is None:
        assert section["fraction"] == pytest.approx(3725.0 / section["images_per_sec"])
        assert "MLPerf" in section["source"]
    else:
        assert section["fraction"] is None and reason in section["reason"]


def test_every_anchor_names_its_source_and_a_known_device():
    labels = {peak.label for _, peak in flops.PEAKS}
    for (model, label), anchor in anchors.ANCHORS.items():
        assert label in labels and anchor.source.startswith("MLPerf Training") and anchor.images_per_sec > 0


def test_the_table_line_shows_every_rung_or_why_not():
    record = {"flops": {"mfu_vs_achievable": 0.25, "achievable_flops_per_sec": 2e11, "devices": 2, "mfu": None,
                        "mfu_unavailable_reason": "CPU: no datasheet peak"},
              "ceiling": {"math": "fp32", "threads": 2, "source": "cached"},
              "anchor": {"images_per_sec": None, "fraction": None, "reason": "no anchor for alexnet on X"}}
    line = output.headroom_line(record, "cpu")
    assert "MFU vs achievable 25.0% of 2 x 100.0 GFLOP/s achievable (GEMM fp32, 2 threads, cached)" in line
    assert "vs datasheet n/a (CPU: no datasheet peak)" in line and "no anchor for alexnet on X" in line
    assert "above 100%" not in line
    beaten = {**record, "flops": {**record["flops"], "mfu_vs_achievable": 2.68},
              "ceiling": {**record["ceiling"], "measured_utc": "2026-12-05T07:27:18Z"}}
    assert ("268.0% of 2 x 100.0 GFLOP/s achievable (GEMM fp32, 2 threads, cached) — above 100%: the ceiling (probed "
            "2026-12-05T07:27:18Z) is below this run's own rate") in output.headroom_line(beaten, "cpu")


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_a_real_run_records_its_ceiling_and_reads_it_back_the_next_time(framework, tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path), "DLBENCH_CEILING": "cached"}  # the suite's default is off (conftest)
    args = ("--framework", framework, "--model", "alexnet", "--image-size", "64", *SMALL, "--json", "--display-every",
            "0", "--device", "cpu", "--num-threads", "1")
    records = []
    for _ in range(2):
        result = bench(*args, env=env)
        assert result.returncode == 0, result.stderr
        records.append(validate_record(last_json_line(result.stdout)))
        assert "headroom: MFU vs achievable" in result.stderr
    first, second = records
    assert first["ceiling"]["source"] == "measured" and second["ceiling"]["source"] == "cached"
    assert second["ceiling"]["flops_per_sec"] == first["ceiling"]["flops_per_sec"] > 0
    assert second["ceiling"]["cache_file"].startswith(str(tmp_path))
    section = second["flops"]
    achievable = first["ceiling"]["flops_per_sec"]
    assert section["mfu_vs_achievable"] == pytest.approx(section["achieved_flops_per_sec"] / achievable)
    assert second["ranks"][0]["ceiling_flops_per_sec"] == section["achievable_flops_per_sec"]
    assert second["ranks"][0]["step_time_s"]["n"] == second["step_time_s"]["n"]
    assert second["anchor"]["reason"].startswith("no anchor for alexnet")
    off = bench(*args, "--ceiling", "off", env=env)
    record = validate_record(last_json_line(off.stdout))
    assert record["ceiling"] is None and record["flops"]["achievable_unavailable_reason"] == "--ceiling off"


# -- what a lent GPU checks (perf/gpu_checks.py) ------------------------------------------------------


def gpu_record(ceiling_tflops, math="bf16", source="measured", mfu=0.07):
    peak = 989.5e12
    achieved = mfu * peak
    return {"ceiling": {"flops_per_sec": ceiling_tflops * 1e12, "math": math, "source": source},
            "flops": {"math": "bf16", "peak_flops_per_sec": peak, "mfu": mfu,
                      "mfu_vs_achievable": achieved / (ceiling_tflops * 1e12) if ceiling_tflops else None,
                      "achievable_unavailable_reason": None}}


@pytest.mark.parametrize("record, problem", [
    (gpu_record(790), None),
    (gpu_record(1100), "above the datasheet"),
    (gpu_record(790, math="fp32"), "probed in fp32"),
    (gpu_record(790, source="cached"), "expected measured"),
    ({"ceiling": {"flops_per_sec": None, "unavailable_reason": "OutOfMemoryError: x"}, "flops": {}}, "OutOfMemoryError"),
])
def test_the_gpu_ceiling_check(record, problem):
    import sys

    sys.path.insert(0, str(ROOT / "perf"))
    import gpu_checks

    problems = gpu_checks.EXTRA_CHECKS["ceiling"](record)
    assert (problems == []) if problem is None else any(problem in p for p in problems), problems
