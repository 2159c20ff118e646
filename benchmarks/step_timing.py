"""How a timed loop's steps are timed (--step-timing), and the record's `step_timing` section.

- `sync` (the default until a GPU measurement decides, perf/gpu.md): the device is synchronised after
  every step and the host clock reads the step's end. torch's cudnn.benchmark stays off.
- `events`: a CUDA event is recorded on the device's stream after every step and the device is
  synchronised once at each end of the loop; a step's time is the elapsed time between the event before
  it and its own (timing.event_stamps), so the host never waits inside the loop. cudnn.benchmark is
  turned on with it: both are what the fastest honest loop does, and phase B of perf/gpu_validate.py
  measures them together against that loop. torch on a GPU only: CUDA events do not exist on a CPU
  (whose steps are synchronous anyway) and TensorFlow has no per-step device events; both are refused
  (one line, exit 2) rather than timed some other way under the name.

No framework is imported at module level; apply_torch imports torch.
"""

from __future__ import annotations

from .errors import UsageError, choices

SYNC, EVENTS = "sync", "events"
STEP_TIMINGS = (SYNC, EVENTS)
CLOCKS = {SYNC: "host", EVENTS: "cuda-events"}  # the record's step_timing.clock for each choice


def check(asked: str, framework, device: str | None) -> None:
    """Refuse a timing this framework (a FrameworkSpec) or device cannot do (UsageError: one line, exit
    2); `device` auto or None: not known yet (the backend checks once it has picked one: check_device)."""
    if asked not in framework.step_timings:
        raise UsageError(f"--step-timing {asked}: {framework.title} has no per-step device events "
                         f"(choices for it: {choices(framework.step_timings)})")
    check_device(asked, device)


def check_device(asked: str, device: str | None) -> None:
    if asked == EVENTS and device == "cpu":
        raise UsageError("--step-timing events needs a GPU: CUDA events do not exist on a CPU, whose steps are "
                         f"synchronous (choices on a CPU: {SYNC})")


def section(asked: str, cudnn_benchmark: bool | None) -> dict:
    """The record's `step_timing` section (record.StepTimingInfo says what each field means)."""
    return {"clock": CLOCKS[asked], "cudnn_benchmark": cudnn_benchmark}


def apply_torch(asked: str, device):
    """cudnn.benchmark on under `events`, off otherwise, read back; (a factory of timing CUDA events, or
    None for the host clock; the record's section)."""
    import torch

    on_gpu = device.type == "cuda"
    check_device(asked, "gpu" if on_gpu else "cpu")
    torch.backends.cudnn.benchmark = asked == EVENTS
    new_event = (lambda: torch.cuda.Event(enable_timing=True)) if asked == EVENTS else None
    return new_event, section(asked, torch.backends.cudnn.benchmark if on_gpu else None)
