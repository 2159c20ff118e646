"""Run one benchmark from the host and get its record back: the one call sweeps,
compare-runtimes and `benchrun run` share.

bench writes its record with `--output` into a results directory (mounted
into the container when there is one) and the record is read back from
there, so the same path works for every runtime and launcher.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import launchers


@dataclass
class RunRequest:
    bench_args: list[str]
    runtime: str = "local"
    image: str | None = None
    launcher: str | None = None  # None: one process, no launcher
    num_workers: int = 1
    num_ps: int = 0
    timeout_s: float | None = None
    launcher_args: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    record: dict | None  # None when bench wrote nothing (bad input, or the launch itself failed)
    exit_code: int
    command: list[str]


def bench_command(request: RunRequest) -> list[str]:
    """How to start bench for this request's runtime (`local`: this Python's package)."""
    if request.runtime != "local":
        raise ValueError(f"runtime {request.runtime!r} is not available in this build of benchrun")
    return [sys.executable, "-m", "benchmarks"]


def command(request: RunRequest, record_path: Path) -> list[str]:
    args = [*request.bench_args, "--output", str(record_path)]
    if request.timeout_s is not None and "--timeout" not in args:
        args += ["--timeout", str(request.timeout_s)]
    if request.launcher is None:
        return [*bench_command(request), *args]
    launch = [sys.executable, "-m", "runners", "launch", "--launcher", request.launcher,
              "-n", str(request.num_workers), "--bench-command", shlex.join(bench_command(request))]
    if request.num_ps:
        launch += ["--num-ps", str(request.num_ps)]
    if request.timeout_s is not None:
        launch += ["--timeout", str(request.timeout_s)]
    launch += [f"--launcher-arg={arg}" for arg in request.launcher_args]
    return [*launch, "--", *args]


def run(request: RunRequest, results_dir: str | Path | None = None, quiet: bool = False) -> Outcome:
    """Run it; the record (if bench wrote one) is returned, not left behind."""
    if request.launcher is not None and request.launcher not in launchers.LAUNCHERS:
        raise ValueError(f"unknown launcher {request.launcher!r}")
    with tempfile.TemporaryDirectory(prefix="benchrun-", dir=results_dir) as tmp:
        record_path = Path(tmp) / "record.jsonl"
        argv = command(request, record_path)
        stream = subprocess.DEVNULL if quiet else None
        proc = subprocess.run(argv, stdout=stream, stderr=stream)
        lines = record_path.read_text().splitlines() if record_path.exists() else []
        record = json.loads(lines[-1]) if lines else None
        return Outcome(record, proc.returncode, argv)
