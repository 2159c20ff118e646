"""--display-every: progress lines (or a bar on a terminal) that cost the measurement nothing."""

from __future__ import annotations

import itertools
import os
import pty
import subprocess
import sys
import time

from benchmarks.measure import timing
from benchmarks.results.progress import ProgressBar, step_line
from infra.helpers import ROOT, bench

TINY = ["--framework", "torch", "--model", "resnet50", "--image-size", "32", "--batch-size", "2",
        "--num-warmup-batches", "2", "--num-batches", "4", "--num-threads", "2"]


def test_display_time_is_taken_out_of_the_measurement():
    shown = []

    def step(_batch):
        time.sleep(0.02)
        return 1.5

    def display(step_number, rate, loss):
        shown.append((step_number, rate, loss))
        time.sleep(0.2)  # a slow terminal: must not count

    loop = timing.run_steps(itertools.repeat(None), step, lambda: None, 6, 4, display_every=3, display=display)
    assert [s for s, _, _ in shown] == [3, 6] and all(loss == 1.5 for _, _, loss in shown)
    assert loop.wall_time_s < 0.2  # 6 x 20 ms, not + 2 x 200 ms
    assert abs(loop.wall_time_s - sum(loop.step_times_s)) < 0.01
    assert max(loop.step_times_s) < 0.1  # the step after a display does not carry it
    assert all(abs(rate - 3 * 4 / 0.06) / (3 * 4 / 0.06) < 0.5 for _, rate, _ in shown)


def test_progress_lines_every_n_steps_on_stderr():
    result = bench(*TINY, "--display-every", "2", timeout=300)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("bench: step ")]
    assert [line.split(" (")[0] for line in lines] == ["bench: step 2/2", "bench: step 2/4", "bench: step 4/4"]
    assert "(warmup)" in lines[0] and "(repeat 1)" in lines[1]
    assert "images/sec over the last 2 steps, loss " in lines[2]
    quiet = bench(*TINY, "--display-every", "0", timeout=300)
    assert quiet.returncode == 0 and "bench: step " not in quiet.stderr


def test_a_terminal_gets_a_progress_bar_with_an_eta():
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks", *TINY, "--display-every", "1"], cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=terminal,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "160", "TERM": "xterm"})
    os.close(terminal)
    seen = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        seen += chunk
    proc.wait(timeout=300)
    os.close(controller)
    text = seen.decode(errors="replace")
    assert proc.returncode == 0, text[-2000:]
    assert "ETA" in text and "img/s" in text and "repeat 1" in text
    assert "bench: step " not in text  # the lines became the bar


def test_the_bar_reads_exactly_the_lines_the_worker_prints():
    import io

    bar = ProgressBar(io.StringIO())
    assert bar.feed(step_line("repeat 2", 30, 100, 12.3456, 10, 6.9))
    assert bar.progress.tasks[0].completed == 30 and bar.progress.tasks[0].fields == {"rate": "12.35", "loss": "6.9000"}
    assert bar.feed(step_line("warmup", 5, 10, 1.0, 5, None))
    assert not bar.feed("bench: warmup: 10 batches of 64")
