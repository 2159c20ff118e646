"""Model FLOPs, achieved FLOP/s and model FLOPs utilisation (MFU): the record's `flops` section.

The framework counts its own model after the timed loops (Framework.count_flops), so counting never
costs measured time. Achieved FLOP/s = 3 x forward FLOPs per image x images/sec, the usual "model
FLOPs" convention, so MFU compares across frameworks. MFU = achieved / (dense datasheet peak for the
math in effect x devices); a CPU, a MIG slice or a device not in PEAKS gets no MFU: null with the
reason, never a guess (docs/results.md#flops). Beside it, on CPUs too, MFU vs achievable: achieved /
the measured GEMM ceilings of the devices that trained (benchmarks/measure/ceiling.py), a number a run can
really approach.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BASIS = "3 x forward"
TRAINING_MULTIPLIER = 3  # forward + backward (input and weight gradients) ~ 3 x forward

H100_SHEET = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
H200_SHEET = "https://www.nvidia.com/en-us/data-center/h200/"
A100_SHEET = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
V100_SHEET = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
L40S_SHEET = "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
L4_SHEET = "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet"
A10_SHEET = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf"
T4_SHEET = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf"


@dataclass(frozen=True)
class Peak:
    """Dense datasheet peaks in TFLOP/s (the sheets' sparsity figures halved); None: no such units."""

    label: str
    fp32: float
    tf32: float | None
    fp16: float | None
    bf16: float | None
    source: str


# Matched in order against the upper-cased device name (nvidia-smi / torch / TF spelling).
PEAKS: list[tuple[str, Peak]] = [
    (r"H100.*NVL", Peak("H100 NVL", 60.0, 417.5, 835.5, 835.5, H100_SHEET)),
    (r"H100.*PCIE", Peak("H100 PCIe", 51.0, 378.0, 756.5, 756.5, H100_SHEET)),
    (r"H100", Peak("H100 SXM", 67.0, 494.5, 989.5, 989.5, H100_SHEET)),
    (r"H200.*NVL", Peak("H200 NVL", 60.0, 417.5, 835.5, 835.5, H200_SHEET)),
    (r"H200", Peak("H200 SXM", 67.0, 494.5, 989.5, 989.5, H200_SHEET)),
    (r"A100", Peak("A100", 19.5, 156.0, 312.0, 312.0, A100_SHEET)),
    (r"V100S", Peak("V100S PCIe", 16.4, None, 130.0, None, V100_SHEET)),
    (r"V100.*PCIE", Peak("V100 PCIe", 14.0, None, 112.0, None, V100_SHEET)),
    (r"V100.*SXM2", Peak("V100 SXM2", 15.7, None, 125.0, None, V100_SHEET)),
    (r"\bL40S\b", Peak("L40S", 91.6, 183.0, 362.05, 362.05, L40S_SHEET)),
    (r"\bL4\b", Peak("L4", 30.3, 60.0, 121.0, 121.0, L4_SHEET)),
    (r"\bA10\b", Peak("A10", 31.2, 62.5, 125.0, 125.0, A10_SHEET)),
    (r"\bT4\b", Peak("T4", 8.1, None, 65.0, None, T4_SHEET)),
]


@dataclass(frozen=True)
class Counted:
    """What a framework counted for its model at the run's image size."""

    forward_per_image: float  # FLOPs, 2 per multiply-add
    training_step_per_image: float | None  # forward + backward counted, where the framework can
    counted_by: str


def device_peak(device_name: str) -> tuple[Peak | None, str | None]:
    """(peak, None) for a known GPU; (None, why) otherwise."""
    name = device_name.upper()
    if "MIG" in name:
        return None, f"{device_name} is a MIG slice: its share of the datasheet peak is not published"
    for pattern, peak in PEAKS:
        if re.search(pattern, name):
            return peak, None
    return None, f"no datasheet peak for {device_name!r} in benchmarks/measure/flops.py (PEAKS)"


def math_in_effect(precision: dict | None) -> str:
    """Which units do the matmuls: fp32, tf32 (only where really in effect), fp16 or bf16."""
    if not precision:
        return "fp32"
    effective = precision["effective"]
    if effective == "tf32":
        return "tf32" if precision.get("tf32_in_effect") else "fp32"
    return {"amp-fp16": "fp16", "amp-bf16": "bf16"}.get(effective, "fp32")


def peak_flops(device_kind: str, device_name: str, precision: dict | None) -> tuple[float | None, str | None, str | None]:
    """(FLOP/s per device, datasheet, None) or (None, None, why there is no MFU)."""
    if device_kind != "gpu":
        return None, None, "CPU: no datasheet peak; achieved FLOP/s only"
    peak, why = device_peak(device_name)
    if peak is None:
        return None, None, why
    math = math_in_effect(precision)
    tflops = getattr(peak, math)
    if tflops is None:
        return None, None, f"{peak.label} has no {math} tensor cores in its datasheet"
    return tflops * 1e12, peak.source, None


def achieved(forward_per_image: float, images_per_sec: float) -> float:
    return TRAINING_MULTIPLIER * forward_per_image * images_per_sec


def section(counted: Counted | None, reason: str | None, image_size: int, images_per_sec: float | None,
            framework: dict | None, devices: int, precision: dict | None,
            achievable: tuple[float | None, str | None] = (None, "no ceiling measured")) -> dict:
    """The record's `flops` section. `images_per_sec`: the run's total over workers; `devices`:
    the devices those workers trained on (MFU divides by all their peaks); `achievable`: (the sum of
    those devices' measured ceilings, None) or (None, why there is none)."""
    kind = (framework or {}).get("device_kind", "cpu")
    name = (framework or {}).get("device_name", "")
    peak, source, mfu_reason = peak_flops(kind, name, precision)
    rate = achieved(counted.forward_per_image, images_per_sec) if counted and images_per_sec else None
    if counted is None:
        mfu_reason = f"no FLOP count: {reason}"
    mfu = rate / (peak * devices) if rate is not None and peak is not None and devices > 0 else None
    ceiling, ceiling_reason = achievable
    if counted is None:
        ceiling_reason = f"no FLOP count: {reason}"
    vs_achievable = rate / ceiling if rate is not None and ceiling else None
    return {
        "forward_per_image": counted.forward_per_image if counted else None,
        "training_step_per_image": counted.training_step_per_image if counted else None,
        "counted_by": counted.counted_by if counted else None,
        "count_failed_reason": None if counted else reason,
        "image_size": image_size,
        "basis": BASIS,
        "achieved_flops_per_sec": rate,
        "math": math_in_effect(precision) if kind == "gpu" else None,
        "peak_flops_per_sec": peak,
        "peak_source": source,
        "devices": devices,
        "mfu": mfu,
        "mfu_unavailable_reason": None if mfu is not None else mfu_reason,
        "achievable_flops_per_sec": ceiling,
        "mfu_vs_achievable": vs_achievable,
        "achievable_unavailable_reason": None if vs_achievable is not None else ceiling_reason,
    }


def rate_text(flops_per_sec: float | None, device_kind: str) -> str:
    """TFLOP/s on a GPU, GFLOP/s on a CPU (the units people quote for each)."""
    if flops_per_sec is None:
        return "n/a"
    if device_kind == "gpu":
        return f"{flops_per_sec / 1e12:,.1f}"
    return f"{flops_per_sec / 1e9:,.1f}"


def rate_unit(device_kind: str) -> str:
    return "TFLOP/s" if device_kind == "gpu" else "GFLOP/s"
