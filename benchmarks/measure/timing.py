"""The timed loop, shared by every backend.

A step's time is the time its work took on the device, not the time to enqueue it: the device is
synchronised at every boundary (--step-timing sync), or an event recorded after each step times it on
the device itself (--step-timing events). Either way the stamps become steps in one place
(loop_from_stamps; docs/results.md, "A step"), with each step's input wait apart.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..core.errors import Stopped

clock = time.perf_counter


class StepBoundary:
    """A request to stop at the next step boundary (processes.BOUNDARY_SIGNALS: Slurm's pre-timeout warning),
    set by a signal handler and read by run_steps after each step: a flag, never an exception, so the step in
    progress ends whole and is timed like every other; the loop ends with the steps it has."""

    def __init__(self):
        self.signal: str | None = None  # the signal's name once requested

    def request(self, signal: str) -> None:
        self.signal = self.signal or signal

    @property
    def requested(self) -> bool:
        return self.signal is not None


boundary = StepBoundary()  # the process's one: the worker's handler sets it, every timed loop reads it


class Running:
    """The timed loop running now, readable from another thread: a rank of several processes stopped by a signal
    keeps its steps from a thread of its own (processes.on_stop_in_thread), while the main thread may be blocked in
    a collective that will never return. Set once per loop, outside the steps: nothing is added to a timed step."""

    def __init__(self):
        self._steps: Callable[[], TimedLoop | None] = lambda: None

    def start(self, steps: Callable[[], TimedLoop | None]) -> None:
        self._steps = steps

    def clear(self) -> None:
        """Before a loop whose steps a stop would keep: until it starts, the last loop's (warmup's) are not its."""
        self._steps = lambda: None

    def steps(self) -> TimedLoop | None:
        """The steps the loop now running (or the last one, once it returned) has timed; None before any."""
        return self._steps()


running = Running()  # the process's one: set by run_steps, read by the measurement (Measurement.steps_so_far)


@dataclass
class TimedLoop:
    images: int
    wall_time_s: float
    step_times_s: list[float] = field(default_factory=list)
    input_wait_s: list[float] = field(default_factory=list)
    last_loss: object = None
    losses: list = field(default_factory=list)  # every step's loss, only when asked (--tensorboard)
    # Under TF ParameterServerStrategy the chief measures every worker's steps itself.
    per_worker: dict[int, "TimedLoop"] | None = None

    @property
    def images_per_sec(self) -> float:
        return self.images / self.wall_time_s


def loop_from_stamps(
    start: float,
    stamps: list[tuple[float, ...]],
    images_per_step: int,
    last_loss: object = None,
    losses: list | None = None,
    fetch_started: list[float] | None = None,
) -> TimedLoop:
    """The one place clock stamps become a TimedLoop, for every strategy (docs/results.md, "A step").

    `stamps` are (batch fetched, step ended[, clock resumed]) per step, on one clock from `start`. A
    step runs from the previous step's end (or `resumed`: time between steps spent on a progress line
    belongs to no step) to its own end, its input wait from the same point to the fetch, or from
    `fetch_started` where a step begins fetching later (TF PS). The wall time is the sum of the steps."""
    steps, waits, begin = [], [], start
    for index, stamp in enumerate(stamps):
        fetched, end = stamp[0], stamp[1]
        waits.append(fetched - (begin if fetch_started is None else max(begin, fetch_started[index])))
        steps.append(end - begin)
        begin = stamp[2] if len(stamp) > 2 else end
    return TimedLoop(
        images=len(stamps) * images_per_step,
        wall_time_s=sum(steps),
        step_times_s=steps,
        input_wait_s=waits,
        last_loss=last_loss,
        losses=losses or [],
    )


def merge_loops(loops: dict[int, TimedLoop], last_loss: object = None) -> TimedLoop:
    """One process's view of loops that ran elsewhere at the same time (TF PS workers):
    all their images and steps, over the slowest one's wall time; `per_worker` keeps them."""
    return TimedLoop(
        images=sum(loop.images for loop in loops.values()),
        wall_time_s=max(loop.wall_time_s for loop in loops.values()),
        step_times_s=[t for loop in loops.values() for t in loop.step_times_s],
        input_wait_s=[t for loop in loops.values() for t in loop.input_wait_s],
        last_loss=last_loss,
        per_worker=loops,
    )



def event_stamps(start: float, host: list[tuple], events: list, resumed: dict) -> list[tuple]:
    """Per-step stamps for loop_from_stamps on the device's own timeline, from timing events
    (docs/results.md, `step_timing`). `events[0]` was recorded when the clock started, `events[i + 1]`
    after step i, `resumed[i]` after step i's progress line; `elapsed_time` is in ms (torch.cuda.Event).
    `host`: run_steps' (fetched, enqueued[, resumed]) host stamps, for the input waits."""
    stamps, now, host_begin, before = [], start, start, events[0]
    for index, (fetched, enqueued, *host_resumed) in enumerate(host):
        after = events[index + 1]
        end = now + before.elapsed_time(after) / 1000
        wait = min(max(fetched - host_begin, 0.0), end - now)
        if index in resumed:
            resumes = end + after.elapsed_time(resumed[index]) / 1000
            stamps.append((now + wait, end, resumes))
            now, before = resumes, resumed[index]
        else:
            stamps.append((now + wait, end))
            now, before = end, after
        host_begin = host_resumed[0] if host_resumed else enqueued
    return stamps


def _recorded(new_event: Callable[[], object]) -> object:
    event = new_event()
    event.record()
    return event


def run_steps(
    batches: Iterator,
    train_step: Callable[[object], object],
    synchronize: Callable[[], None],
    num_steps: int,
    images_per_step: int,
    keep_losses: bool = False,
    display_every: int = 0,
    display: Callable[[int, float, object], None] | None = None,
    annotate: Callable[[str, int], contextlib.AbstractContextManager] | None = None,
    new_event: Callable[[], object] | None = None,
) -> TimedLoop:
    """Run `num_steps` training steps and stamp each, the device synchronised at every boundary, or with
    `new_event` (--step-timing events: a factory of torch.cuda.Event with timing) at the loop's ends only.
    Every `display_every` steps, `display(step, images/sec over those N steps, loss)` runs after the
    step's end is known; its time belongs to no step, so showing progress does not change what is
    measured. `annotate(kind, index)` (--trace) marks each "step" and its "input" fetch in a profiler trace.
    """
    nothing = contextlib.nullcontext()  # one shared no-op: nothing allocated inside the timed loop
    mark = annotate or (lambda kind, index: nothing)
    synchronize()
    start = clock()
    events = [_recorded(new_event)] if new_event else None
    stamps, losses, loss, resumed = [], [], None, {}

    def steps_so_far() -> list[tuple]:
        return stamps if events is None else event_stamps(start, stamps, events, resumed)

    def taken_now() -> TimedLoop | None:  # from another thread: the steps stamped by now, the list being appended
        now = stamps[:]
        return _timed_before_stop(start, now, lambda: now if events is None else event_stamps(start, now, events, resumed),
                                  images_per_step, events)

    running.start(taken_now)

    try:
        for index in range(num_steps):
            if boundary.requested:  # before the step: a request during warmup or between repeats times no more
                break
            with mark("step", index):
                with mark("input", index):
                    batch = next(batches)
                fetched = clock()
                loss = train_step(batch)
                if events is None:
                    synchronize()
                else:
                    events.append(_recorded(new_event))
                end = clock()
            stamps.append((fetched, end))
            if keep_losses:  # a reference only: read back after the loop
                losses.append(loss)
            if display_every and (index + 1) % display_every == 0 and display is not None:
                if events is not None:
                    events[-1].synchronize()
                recent = loop_from_stamps(start, steps_so_far(), images_per_step).step_times_s[-display_every:]
                display(index + 1, display_every * images_per_step / sum(recent), loss)
                stamps[-1] = (fetched, end, clock())
                if events is not None:
                    resumed[index] = _recorded(new_event)
    except Stopped as stop:  # a stop now (processes.STOP_SIGNALS): the step in progress is lost, those before kept
        stop.loop = _timed_before_stop(start, stamps, steps_so_far, images_per_step, events)
        raise
    if events is not None:
        synchronize()
    return loop_from_stamps(start, steps_so_far(), images_per_step, last_loss=loss, losses=losses)


def _timed_before_stop(start: float, stamps: list, steps_so_far: Callable[[], list], images_per_step: int,
                       events: list | None) -> TimedLoop | None:
    """The steps a stopped loop had timed; None when there were none, or the device cannot say how long they took
    (an event of theirs not readable: the device is what hangs)."""
    if not stamps:
        return None
    try:
        if events is not None:
            events[len(stamps)].synchronize()
        return loop_from_stamps(start, steps_so_far(), images_per_step)
    except Exception:  # noqa: BLE001 - the record says why the run stopped; its steps are only kept when known
        return None
