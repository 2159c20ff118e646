"""The timed loop, shared by every backend.

The device is synchronised at every boundary (before the clock starts and
after each step) so a step's time is the time its work took on the device,
not the time to enqueue it. The first step's input wait and the step itself
are separated so real-data runs show how long each step waited for I/O.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

clock = time.perf_counter


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
    """The one place clock stamps become a TimedLoop, for every strategy.

    `stamps` are (batch fetched, step ended[, clock resumed]) per step, in order,
    on one clock; `start` is when the loop's clock started. A step runs from the
    end of the previous step (the first: from `start`) to its own end, so it
    includes its wait for input; the input wait runs from the same point to the
    fetch. `resumed`, when given, is where the next step starts instead of this
    step's end: time spent between steps on something not measured (a progress
    line) belongs to no step. `fetch_started`, when given, is when each step began
    fetching its batch, where that is not right after the previous step (TF PS: a
    worker fetches once the chief's next step reached it, after the previous
    step's push): the input wait runs from it, and the time before it stays in
    the step. The loop's wall time is the sum of its steps."""
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


_NOTHING = contextlib.nullcontext()


def _unmarked(kind: str, index: int) -> contextlib.AbstractContextManager:
    return _NOTHING  # one shared no-op: nothing allocated inside the timed loop


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
) -> TimedLoop:
    """Run `num_steps` training steps, synchronising the device at every boundary; stamp each.

    Every `display_every` steps, `display(step, images/sec over those steps, loss)` runs after
    the step's sync and clock reading; its time is taken out of the loop's wall time and out of
    the next step, so showing progress does not change what is measured.
    `annotate(kind, index)` (bench --trace, after the timed loops) returns a context manager that
    marks each step ("step") and its input fetch ("input") in a profiler trace.
    """
    mark = annotate or _unmarked
    synchronize()
    start = clock()
    stamps, losses, loss = [], [], None
    for index in range(num_steps):
        with mark("step", index):
            with mark("input", index):
                batch = next(batches)
            fetched = clock()
            loss = train_step(batch)
            synchronize()
            end = clock()
        stamps.append((fetched, end))
        if keep_losses:  # a reference only: read back after the loop
            losses.append(loss)
        if display_every and (index + 1) % display_every == 0 and display is not None:
            recent = loop_from_stamps(start, stamps, images_per_step).step_times_s[-display_every:]
            display(index + 1, display_every * images_per_step / sum(recent), loss)
            stamps[-1] = (fetched, end, clock())
    return loop_from_stamps(start, stamps, images_per_step, last_loss=loss, losses=losses)
