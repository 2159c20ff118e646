"""The best public result for a device and model: the top rung of the headroom ladder (record `anchor`).

Users hold a number against the best anyone has published for the same hardware. The table is short
and every entry names its source; a device or model not in it gets "no anchor", never a guess. An
anchor holds only under its own conditions (MLPerf's ResNet-50: 224 px, mixed precision): a run
outside them gets the anchor's figure and the reason there is no fraction, not a misleading ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

from .flops import device_peak

MLPERF_TRAINING = "https://mlcommons.org/benchmarks/training/"


@dataclass(frozen=True)
class Anchor:
    images_per_sec: float  # per device
    source: str
    conditions: str
    image_size: int
    maths: tuple[str, ...]  # the matmul units the result ran on (flops.math_in_effect)


# (model, device label as flops.PEAKS names it) -> the best public images/sec per device.
ANCHORS: dict[tuple[str, str], Anchor] = {
    ("resnet50", "H200 SXM"): Anchor(7950.0, f"MLPerf Training v4.0, ResNet-50, per GPU ({MLPERF_TRAINING})",
                                     "224 px, mixed precision, closed division", 224, ("fp16", "bf16")),
    ("resnet50", "H100 SXM"): Anchor(7450.0, f"MLPerf Training v4.0, ResNet-50, per GPU: 7,160 to 7,450 over the "
                                     f"H100 submissions, the best kept ({MLPERF_TRAINING})",
                                     "224 px, mixed precision, closed division", 224, ("fp16", "bf16")),
    ("resnet50", "A100"): Anchor(3399.0, f"MLPerf Training v2.1, ResNet-50, per GPU ({MLPERF_TRAINING})",
                                 "224 px, mixed precision, closed division", 224, ("fp16", "bf16")),
}


def section(model: str, device_kind: str, device_name: str, image_size: int, math: str,
            images_per_sec: float | None, devices: int) -> dict:
    """The record's `anchor`: this run's images/sec per device against the table's, or why there is none."""
    peak, _ = device_peak(device_name) if device_kind == "gpu" else (None, None)
    anchor = ANCHORS.get((model, peak.label)) if peak is not None else None
    if anchor is None:
        return {"images_per_sec": None, "source": None, "conditions": None, "fraction": None,
                "reason": f"no anchor for {model} on {device_name or device_kind}"}
    per_device = images_per_sec / devices if images_per_sec and devices else None
    reason = None
    if image_size != anchor.image_size:
        reason = f"the anchor is at {anchor.image_size} px, this run at {image_size} px"
    elif math not in anchor.maths:
        reason = f"the anchor ran {' or '.join(anchor.maths)} math, this run {math}"
    return {"images_per_sec": anchor.images_per_sec, "source": anchor.source, "conditions": anchor.conditions,
            "fraction": per_device / anchor.images_per_sec if reason is None and per_device else None,
            "reason": reason}
