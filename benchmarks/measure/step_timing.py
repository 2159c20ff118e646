"""How a timed loop's steps are timed (--step-timing), and the record's `step_timing` section.

- `sync`: the device is synchronised after every step and the host clock reads the step's end.
- `events`: a CUDA event after every step, the device synchronised at the loop's ends only
  (timing.event_stamps), and cudnn.benchmark on: what the fastest honest loop does. torch on a GPU
  only; elsewhere it is refused (one line, exit 2) rather than timed some other way under the name.
docs/results.md (`step_timing`) says more. No framework is imported at module level.
"""

from __future__ import annotations

from ..core.errors import UsageError, choices

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
