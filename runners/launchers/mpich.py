"""`mpich`: MPICH's Hydra (`mpirun.mpich`), the launcher of MPICH-ABI images (Shifter/Sarus MPI hooks)."""

from __future__ import annotations

from .base import Launcher, LaunchSpec


class MpichLauncher(Launcher):
    name = "mpich"
    binary = "mpirun.mpich"
    install_hint = "scripts/ensure-packages.sh mpich"

    def command(self, spec: LaunchSpec) -> list[str]:
        argv = [self.binary, "-n", str(spec.processes)]
        if spec.hosts:
            argv += ["-hosts", spec.host_slots(spec.hosts)]
        for name, value in self.environment(spec).items():
            argv += ["-genv", name, value]
        return [*argv, *spec.extra, *spec.bench, *spec.run.to_argv()]
