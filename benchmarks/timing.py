"""The timed loop, shared by every backend.

The device is synchronised at every boundary (before the clock starts and
after each step) so a step's time is the time its work took on the device,
not the time to enqueue it. The first step's input wait and the step itself
are separated so real-data runs show how long each step waited for I/O.
"""

from __future__ import annotations

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


def run_steps(
    batches: Iterator,
    train_step: Callable[[object], object],
    synchronize: Callable[[], None],
    num_steps: int,
    images_per_step: int,
    keep_losses: bool = False,
    display_every: int = 0,
    display: Callable[[int, float, object], None] | None = None,
) -> TimedLoop:
    """Run `num_steps` training steps; time each and the loop as a whole.

    Every `display_every` steps, `display(step, images/sec over those steps, loss)` runs after
    the step's sync and clock reading; its time is taken out of the loop's wall time and out of
    the next step, so showing progress does not change what is measured.
    """
    synchronize()
    start = previous_end = clock()
    steps, waits, losses, loss = [], [], [], None
    paused = 0.0
    for index in range(num_steps):
        batch = next(batches)
        fetched = clock()
        loss = train_step(batch)
        synchronize()
        end = clock()
        waits.append(fetched - previous_end)
        steps.append(end - previous_end)
        previous_end = end
        if keep_losses:  # a reference only: read back after the loop
            losses.append(loss)
        if display_every and (index + 1) % display_every == 0 and display is not None:
            display(index + 1, display_every * images_per_step / sum(steps[-display_every:]), loss)
            previous_end = clock()
            paused += previous_end - end
    return TimedLoop(
        images=num_steps * images_per_step,
        wall_time_s=previous_end - start - paused,
        step_times_s=steps,
        input_wait_s=waits,
        last_loss=loss,
        losses=losses,
    )
