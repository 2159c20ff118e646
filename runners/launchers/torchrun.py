"""`torchrun`: PyTorch's elastic launcher (single node: --standalone)."""

from __future__ import annotations

import sys

from benchmarks.core.errors import UsageError

from .base import Launcher, LaunchSpec


class TorchrunLauncher(Launcher):
    name = "torchrun"
    binary = "torchrun"
    install_hint = "make venv (torch brings torchrun)"

    def command(self, spec: LaunchSpec) -> list[str]:
        if spec.hosts:
            raise UsageError("torchrun starts one node per invocation: run it under srun for several hosts")
        argv = [self.executable(), "--standalone", "--nnodes", "1", "--nproc-per-node", str(spec.processes), *spec.extra]
        bench = spec.bench
        if bench[:3] == [sys.executable, "-m", "benchmarks"]:
            bench = ["-m", "benchmarks"]  # torchrun runs the module with its own interpreter
        else:
            argv.append("--no-python")
        return [*argv, *bench, *spec.run.to_argv()]
