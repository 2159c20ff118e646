"""`mpirun`: Open MPI. Ranks are not pinned to cores (--bind-to none): the benchmark sets its own threads."""

from __future__ import annotations

import os

from .base import Launcher, LaunchSpec


class OpenMpiLauncher(Launcher):
    name = "mpirun"
    binary = "mpirun"
    install_hint = "scripts/ensure-packages.sh openmpi-bin"

    def command(self, spec: LaunchSpec) -> list[str]:
        argv = [self.binary, "-np", str(spec.processes), "--bind-to", "none", "--oversubscribe"]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        if spec.hosts:
            argv += ["--host", spec.host_slots(spec.hosts)]
        for name, value in self.environment(spec).items():
            argv += ["-x", f"{name}={value}"]
        return [*argv, *spec.extra, *spec.bench, *spec.run.to_argv()]
