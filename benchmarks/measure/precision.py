"""Numeric precision as a labelled axis: what was asked, what it means on this device, and what the
framework reports as really in effect (docs/results.md#precision). `amp` keeps its historic meaning
(amp-fp16 on a GPU, amp-bf16 on a CPU); on a CPU what is not real there is refused rather than silently
run as something else. No framework is imported at module level; the `apply_*` functions import theirs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..core.errors import UsageError, choices

PRECISIONS = ("fp32", "tf32", "amp-fp16", "amp-bf16", "amp")
ALIASES = {"amp": {"gpu": "amp-fp16", "cpu": "amp-bf16"}}  # historic meaning, per device kind
CPU_PRECISIONS = ("fp32", "amp-bf16")  # real on a CPU; the others are refused
AUTOCAST_DTYPE = {"amp-fp16": "float16", "amp-bf16": "bfloat16"}
KERAS_POLICIES = {"amp-fp16": "mixed_float16", "amp-bf16": "mixed_bfloat16"}  # else float32
TF32_MIN_COMPUTE_CAPABILITY = (8, 0)  # Ampere and later have TF32 tensor cores


@dataclass(frozen=True)
class Plan:
    """What a precision means on one device kind, before the framework is touched."""

    requested: str
    effective: str  # fp32 | tf32 | amp-fp16 | amp-bf16
    autocast_dtype: str | None
    tf32: bool  # TF32 asked on (True only for tf32) or explicitly off
    loss_scaling: bool  # float16 gradients need dynamic loss scaling


def plan(requested: str, device_kind: str) -> Plan:
    """Resolve the alias and refuse what this device kind cannot do (UsageError: one line, exit 2)."""
    if requested not in PRECISIONS:
        raise UsageError(f"--precision {requested!r} is invalid (choices: {choices(PRECISIONS)})")
    effective = ALIASES.get(requested, {}).get(device_kind, requested)
    if device_kind == "cpu" and effective not in CPU_PRECISIONS:
        why = "TF32 is a GPU tensor-core mode" if effective == "tf32" else "float16 autocast is a GPU mode"
        raise UsageError(
            f"--precision {requested} is not available on a CPU ({why}; choices on CPU: {choices(CPU_PRECISIONS)}, amp = "
            f"amp-bf16)"
        )
    return Plan(
        requested=requested,
        effective=effective,
        autocast_dtype=AUTOCAST_DTYPE.get(effective),
        tf32=effective == "tf32",
        loss_scaling=effective == "amp-fp16",
    )


def in_effect(plan_: Plan, tf32_flag: bool, compute_capability: tuple[int, int] | None, detail: dict) -> dict:
    """The record's `precision` section: the plan plus what the framework reports. `tf32_flag` is read
    back from the framework after it was set; TF32 is in effect only where the GPU also has TF32 units."""
    return {
        **asdict(plan_),
        "tf32_flag": bool(tf32_flag),
        "tf32_in_effect": bool(tf32_flag) and tuple(compute_capability or ()) >= TF32_MIN_COMPUTE_CAPABILITY,
        "compute_capability": ".".join(map(str, compute_capability)) if compute_capability else None,
        "framework_settings": detail,
    }


def apply_torch(plan_: Plan, device) -> dict:
    """Set TF32 on or off for matmul and cuDNN convolutions and read the settings back."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = plan_.tf32
    torch.backends.cudnn.allow_tf32 = plan_.tf32
    torch.set_float32_matmul_precision("high" if plan_.tf32 else "highest")
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    flag = device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    detail = {
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    return in_effect(plan_, flag, capability, detail)


def torch_dtype(plan_: Plan):
    import torch

    return getattr(torch, plan_.autocast_dtype) if plan_.autocast_dtype else None


def apply_tensorflow(plan_: Plan, gpu_details: dict | None) -> dict:
    """Set TF32 and the Keras dtype policy; read both back. `gpu_details`: get_device_details() or None."""
    import keras
    import tensorflow as tf

    tf.config.experimental.enable_tensor_float_32_execution(plan_.tf32)
    keras.mixed_precision.set_global_policy(KERAS_POLICIES.get(plan_.effective, "float32"))
    capability = tuple(gpu_details["compute_capability"]) if gpu_details and gpu_details.get("compute_capability") else None
    flag = gpu_details is not None and tf.config.experimental.tensor_float_32_execution_enabled()
    detail = {
        "tensor_float_32_execution_enabled": tf.config.experimental.tensor_float_32_execution_enabled(),
        "keras_dtype_policy": keras.mixed_precision.global_policy().name,
    }
    return in_effect(plan_, flag, capability, detail)
