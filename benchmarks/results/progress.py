"""Progress during long runs (`--display-every N`, tf_cnn_benchmarks' flag; docs/bench.md says what it costs
the measurement: nothing). The worker prints a plain line every N steps (`step_line`); on a terminal the
supervisor turns those lines into a rich progress bar with an ETA (`ProgressBar`) instead.
"""

from __future__ import annotations

import re

PREFIX = "bench: step "
_LINE = re.compile(r"^bench: step (\d+)/(\d+) \((.+?)\): ([\d.]+) images/sec over the last (\d+) steps, loss (\S+)$")


def step_line(phase: str, step: int, total: int, images_per_sec: float, window: int, loss: float | None) -> str:
    shown = "n/a" if loss is None else f"{loss:.4f}"
    return f"{PREFIX}{step}/{total} ({phase}): {images_per_sec:.2f} images/sec over the last {window} steps, loss {shown}"


class ProgressBar:
    """A rich bar per phase (warmup, repeat k) on a terminal, fed with the worker's step lines."""

    def __init__(self, stream):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} img/s, loss {task.fields[loss]}"), TextColumn("ETA"), TimeRemainingColumn(),
            console=Console(file=stream), redirect_stdout=False, redirect_stderr=False, transient=False,
        )
        self.tasks: dict[str, int] = {}

    def feed(self, line: str) -> bool:
        """Show a step line on the bar (True), or leave any other line to the caller (False)."""
        match = _LINE.match(line)
        if match is None:
            return False
        step, total, phase, rate, _, loss = match.groups()
        if phase not in self.tasks:
            self.tasks[phase] = self.progress.add_task(phase, total=int(total), rate="-", loss="-")
        self.progress.update(self.tasks[phase], completed=int(step), rate=rate, loss=loss)
        return True

    def print(self, line: str) -> None:
        self.progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
