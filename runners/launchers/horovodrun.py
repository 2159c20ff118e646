"""`horovodrun`: Horovod's launcher, over gloo by default (`--extra=--mpi` for MPI)."""

from __future__ import annotations

from .base import LaunchSpec, Launcher


class HorovodrunLauncher(Launcher):
    name = "horovodrun"
    binary = "horovodrun"

    def command(self, spec: LaunchSpec) -> list[str]:
        hosts = spec.hosts or ["localhost"]
        argv = [self.executable(), "-np", str(spec.processes), "-H", ",".join(f"{h}:{spec.slots_per_host}" for h in hosts)]
        if "--mpi" not in spec.extra:
            argv.append("--gloo")
        return [*argv, *spec.extra, *spec.bench, *spec.bench_args]
