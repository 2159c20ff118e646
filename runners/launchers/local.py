"""`local`: N ranks on this machine, started by dlbench itself with torchrun-style variables."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from .base import Launcher, LaunchSpec, wait_ranks


class LocalLauncher(Launcher):
    name = "local"
    _fault: str | None = None  # how the last run's ranks ended, where process 0's record cannot say

    def rank_env(self, spec: LaunchSpec, rank: int) -> dict[str, str]:
        return {
            **spec.rank_env(),
            "RANK": str(rank),
            "WORLD_SIZE": str(spec.processes),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(spec.processes),
            "DLBENCH_LAUNCHER": "benchrun-local",
        }

    def command(self, spec: LaunchSpec) -> list[str]:
        return [*spec.bench, *spec.run.to_argv()]

    def run(self, spec: LaunchSpec, timeout_s: float | None = None) -> int:
        procs = [
            subprocess.Popen(
                self.command(spec),
                env={**os.environ, **self.rank_env(spec, rank)},
                stdout=None if rank == 0 else sys.stderr,  # only process 0 prints the record
                start_new_session=True,
            )
            for rank in range(spec.processes)
        ]
        code, why = wait_ranks(procs, timeout_s, spec.stop_grace_s)
        self._fault = None if why is None else f"{why} (on {socket.gethostname()})"
        return code

    def fault(self) -> str | None:
        return self._fault
