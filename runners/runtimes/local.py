"""`local`: no container; bench from this Python's benchmarks package, on the host's own paths."""

from __future__ import annotations

import sys
from pathlib import Path

from .base import Command, Invocation, RunPlan, Runtime

BENCH = [sys.executable, "-m", "benchmarks"]  # `bench` of this Python


class LocalRuntime(Runtime):
    name = "local"
    uses_image = False

    def plan(self, spec, host_dir: Path) -> RunPlan:
        return RunPlan(bench=BENCH, typed=BENCH)

    def slots(self, run: Invocation) -> Command:
        return Command(command=[*BENCH, *run.argv[1:]] if run.argv[:1] == ["bench"] else run.argv)
