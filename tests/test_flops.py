"""FLOPs per image against the published figures, achieved FLOP/s and MFU: counted, never guessed.

Published forward multiply-adds per image (docs/results.md#flops cites them). torchvision's
ResNets are "v1.5" (stride 2 on the 3x3 convolution), Keras applications' are the paper's v1
(stride 2 on the first 1x1): fewer multiply-adds, as He et al. report.
"""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks.measure import flops
from infra.helpers import SMALL, bench, last_json_line, python_env, run, validate_record

SIZES = {"alexnet": 224, "resnet50": 224, "resnet101": 224, "resnet152": 224, "inception3": 299}
TORCHVISION_GMAC = {"alexnet": 0.71, "resnet50": 4.09, "resnet101": 7.80, "resnet152": 11.51, "inception3": 5.71}
KERAS_GMAC = {**TORCHVISION_GMAC, "resnet50": 3.8, "resnet101": 7.6, "resnet152": 11.3}
TOLERANCE = 0.05


def gmac(flop_count: float) -> float:
    return flop_count / 2 / 1e9


@pytest.mark.parametrize("model", sorted(SIZES))
def test_torch_forward_flops_match_published(model):
    from benchmarks.frameworks.torch_backend import count_flops

    counted = count_flops(model, SIZES[model], 1000, model == "inception3")
    assert gmac(counted.forward_per_image) == pytest.approx(TORCHVISION_GMAC[model], rel=TOLERANCE)
    # Backward: the input gradient (all but the first layer) and the weight gradient each ~ the forward.
    assert 2.8 < counted.training_step_per_image / counted.forward_per_image < 3.05


TF_COUNT = """
import json, sys
from benchmarks.frameworks import keras_models, tf_backend
sizes = json.loads(sys.argv[1])
count = tf_backend.count_forward_flops
print(json.dumps({m: count(keras_models.build(m, (s, s, 3), 1000, m == "inception3"), (s, s, 3)).forward_per_image
                  for m, s in sizes.items()}))
"""


@pytest.mark.slow
def test_tensorflow_forward_flops_match_published():
    result = run([sys.executable, "-c", TF_COUNT, json.dumps(SIZES)], env=python_env(), timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    counted = json.loads(result.stdout.splitlines()[-1])
    for model, value in counted.items():
        assert gmac(value) == pytest.approx(KERAS_GMAC[model], rel=TOLERANCE), model


H100_BF16 = {"effective": "amp-bf16", "tf32_in_effect": False}


@pytest.mark.parametrize(
    "name, precision, tflops",
    [
        ("NVIDIA H100 80GB HBM3", H100_BF16, 989.5),
        ("NVIDIA H100 PCIe", {"effective": "fp32", "tf32_in_effect": False}, 51.0),
        ("NVIDIA H100 NVL", {"effective": "amp-fp16"}, 835.5),
        ("NVIDIA H200", {"effective": "tf32", "tf32_in_effect": True}, 494.5),
        ("NVIDIA A100-SXM4-80GB", {"effective": "tf32", "tf32_in_effect": True}, 156.0),
        ("NVIDIA A100-SXM4-80GB", {"effective": "tf32", "tf32_in_effect": False}, 19.5),  # asked, not in effect
        ("Tesla V100-SXM2-16GB", {"effective": "amp-fp16"}, 125.0),
        ("NVIDIA L40S", {"effective": "amp-bf16"}, 362.05),
        ("NVIDIA L4", {"effective": "fp32"}, 30.3),
        ("NVIDIA A10", {"effective": "fp32"}, 31.2),
    ],
)
def test_datasheet_peak_per_precision(name, precision, tflops):
    peak, source, why = flops.peak_flops("gpu", name, precision)
    assert peak == pytest.approx(tflops * 1e12) and source.startswith("https://") and why is None


@pytest.mark.parametrize(
    "kind, name, precision, reason",
    [
        ("cpu", "Intel(R) Xeon(R)", None, "CPU"),
        ("gpu", "NVIDIA GeForce RTX 4090", H100_BF16, "no datasheet peak"),
        ("gpu", "NVIDIA A10G", H100_BF16, "no datasheet peak"),  # not an A10
        ("gpu", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", H100_BF16, "MIG"),
        ("gpu", "Tesla V100-SXM2-16GB", H100_BF16, "no bf16"),
    ],
)
def test_no_peak_is_null_with_reason(kind, name, precision, reason):
    peak, source, why = flops.peak_flops(kind, name, precision)
    assert peak is None and source is None and reason in why


def test_mfu_over_all_devices():
    counted = flops.Counted(8e9, 24e9, "test")
    gpu = {"device_kind": "gpu", "device_name": "NVIDIA H100 80GB HBM3"}
    section = flops.section(counted, None, 224, 10_000.0, gpu, 4, H100_BF16)
    assert section["achieved_flops_per_sec"] == pytest.approx(3 * 8e9 * 10_000)
    assert section["mfu"] == pytest.approx(3 * 8e9 * 10_000 / (4 * 989.5e12))
    assert section["mfu_unavailable_reason"] is None and section["math"] == "bf16"
    failed = flops.section(None, "RuntimeError: x", 224, 10_000.0, gpu, 4, H100_BF16)
    assert failed["achieved_flops_per_sec"] is None and failed["mfu"] is None
    assert "no FLOP count" in failed["mfu_unavailable_reason"] and failed["count_failed_reason"] == "RuntimeError: x"


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_record_and_table_carry_achieved_gflops(framework):
    result = bench("--framework", framework, "--model", "alexnet", "--image-size", "64", *SMALL, "--json",
                   "--display-every", "0", "--device", "cpu")  # CPU: GFLOP/s and no MFU, also where a GPU is visible
    assert result.returncode == 0, result.stderr
    record = validate_record(last_json_line(result.stdout))
    section = record["flops"]
    assert section["image_size"] == 64 and section["forward_per_image"] > 0
    assert section["achieved_flops_per_sec"] == pytest.approx(
        3 * section["forward_per_image"] * record["throughput"]["images_per_sec"])
    assert section["mfu"] is None and "CPU" in section["mfu_unavailable_reason"]
    assert "GFLOP/s" in result.stderr and "flops:" in result.stderr
