"""`mpirun`: Open MPI. Ranks are not pinned to cores (--bind-to none): the benchmark sets its own threads.

A stopped mpirun (Ctrl-C, benchrun's SIGTERM) sends its ranks SIGCONT, waits `odls_base_sigkill_timeout`, sends
SIGTERM, waits as long again, then SIGKILL. Open MPI's default of 1 s left process 0 too little to write its record:
every stopped run lost it. The ranks get STOP_GRACE_S, the time a rank's supervisor gives its worker; the stop then
takes at most twice that, which benchrun gives process 0 (LaunchSpec.stop_grace_s).
"""

from __future__ import annotations

import os

from benchmarks.core.processes import STOP_GRACE_S

from .base import Launcher, LaunchSpec


class OpenMpiLauncher(Launcher):
    name = "mpirun"
    binary = "mpirun"
    install_hint = "scripts/ensure-packages.sh openmpi-bin"

    def command(self, spec: LaunchSpec) -> list[str]:
        argv = [self.binary, "-np", str(spec.processes), "--bind-to", "none", "--oversubscribe",
                "--mca", "odls_base_sigkill_timeout", str(STOP_GRACE_S)]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        if spec.hosts:
            argv += ["--host", spec.host_slots(spec.hosts)]
        for name, value in self.environment(spec).items():
            argv += ["-x", f"{name}={value}"]
        return [*argv, *spec.extra, *spec.bench, *spec.run.to_argv()]
