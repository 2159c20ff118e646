"""One module per launcher; adding one = a `Launcher` subclass + one line here."""

from __future__ import annotations

from benchmarks.core.registry import Registry

from .base import Launcher, LaunchSpec, launch_spec

LAUNCHERS = Registry("launcher", {
    "local": "runners.launchers.local:LocalLauncher",
    "mpirun": "runners.launchers.mpirun:OpenMpiLauncher",
    "mpich": "runners.launchers.mpich:MpichLauncher",
    "torchrun": "runners.launchers.torchrun:TorchrunLauncher",
    "horovodrun": "runners.launchers.horovodrun:HorovodrunLauncher",
    "srun": "runners.launchers.srun:SrunLauncher",
})


def get(name: str) -> Launcher:
    return LAUNCHERS.load(name)()


__all__ = ["LAUNCHERS", "LaunchSpec", "Launcher", "get", "launch_spec"]
