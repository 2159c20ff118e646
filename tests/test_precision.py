"""--precision: the alias, what a CPU refuses, and what the record says was in effect."""

from __future__ import annotations

import pytest

from benchmarks.core.errors import UsageError
from benchmarks.measure import precision
from infra.helpers import SMALL, bench, last_json_line, validate_record


@pytest.mark.parametrize(
    "requested, kind, effective, dtype, scaling",
    [
        ("fp32", "cpu", "fp32", None, False),
        ("fp32", "gpu", "fp32", None, False),
        ("tf32", "gpu", "tf32", None, False),
        ("amp-fp16", "gpu", "amp-fp16", "float16", True),
        ("amp-bf16", "gpu", "amp-bf16", "bfloat16", False),
        ("amp-bf16", "cpu", "amp-bf16", "bfloat16", False),
        ("amp", "gpu", "amp-fp16", "float16", True),  # the historic meaning of amp, kept
        ("amp", "cpu", "amp-bf16", "bfloat16", False),
    ],
)
def test_plan_resolves_alias_per_device(requested, kind, effective, dtype, scaling):
    plan = precision.plan(requested, kind)
    assert (plan.requested, plan.effective, plan.autocast_dtype, plan.loss_scaling) == (requested, effective, dtype, scaling)
    assert plan.tf32 == (effective == "tf32")


@pytest.mark.parametrize("requested", ["tf32", "amp-fp16", "fp16", "bf16"])
def test_cpu_refuses_what_it_cannot_do(requested):
    with pytest.raises(UsageError) as error:
        precision.plan(requested, "cpu")
    assert "\n" not in str(error.value) and "fp32" in str(error.value)


@pytest.mark.parametrize(
    "flag, capability, in_effect",
    [(True, (8, 0), True), (True, (9, 0), True), (True, (7, 0), False), (False, (8, 0), False), (True, None, False)],
)
def test_tf32_in_effect_needs_flag_and_ampere(flag, capability, in_effect):
    section = precision.in_effect(precision.plan("tf32", "gpu"), flag, capability, {})
    assert section["tf32_in_effect"] is in_effect
    assert section["tf32_flag"] is flag


def test_explicit_cpu_refusal_is_one_line_exit_2_nothing_written(tmp_path):
    out = tmp_path / "r.jsonl"
    result = bench("--framework", "torch", "--device", "cpu", "--precision", "tf32", "--output", str(out))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "not available on a CPU" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("asked, message", [
    (("--precision", "amp-fp16"), "--precision amp-fp16 is not available on a CPU"),
    (("--step-timing", "events"), "--step-timing events needs a GPU"),  # no CUDA events: refused, not host-timed
])
def test_cpu_refusal_after_device_auto_is_exit_2_nothing_written(tmp_path, asked, message):
    """--device auto on a host where CUDA sees no GPU: made so here (an empty CUDA_VISIBLE_DEVICES hides
    any GPU), so the test means the same on a GPU machine."""
    out = tmp_path / "r.jsonl"
    result = bench("--framework", "torch", "--model", "alexnet", "--image-size", "64", *SMALL,
                   *asked, "--output", str(out), env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 2, result.stderr
    assert f"bench: error: {message}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("framework, requested",
                         [("torch", "amp-bf16"), ("torch", "amp"), ("tensorflow", "amp-bf16"), ("tensorflow", "fp32")])
def test_record_says_what_was_in_effect(framework, requested):
    result = bench("--framework", framework, "--model", "alexnet", "--image-size", "64", *SMALL,
                   "--precision", requested, "--json", "--display-every", "0", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    record = validate_record(last_json_line(result.stdout))
    section = record["precision"]
    assert record["config"]["step_timing"] == "sync" and record["step_timing"] == {"clock": "host", "cudnn_benchmark": None}
    assert record["config"]["precision"] == requested
    assert section["requested"] == requested
    assert section["effective"] == ("fp32" if requested == "fp32" else "amp-bf16")
    assert section["tf32_flag"] is False and section["tf32_in_effect"] is False  # TF32 explicitly off, CPU
    settings = section["framework_settings"]
    if framework == "torch":
        assert settings["float32_matmul_precision"] == "highest"
        assert settings["torch.backends.cudnn.allow_tf32"] is False
    else:
        assert settings["tensor_float_32_execution_enabled"] is False
        assert settings["keras_dtype_policy"] == ("float32" if requested == "fp32" else "mixed_bfloat16")
