"""One module per launcher; adding one = a `Launcher` subclass + one line here."""

from __future__ import annotations

import importlib

from .base import LaunchSpec, Launcher, launch_spec

LAUNCHERS = {
    "local": "runners.launchers.local:LocalLauncher",
    "mpirun": "runners.launchers.mpirun:OpenMpiLauncher",
    "mpich": "runners.launchers.mpich:MpichLauncher",
    "torchrun": "runners.launchers.torchrun:TorchrunLauncher",
    "horovodrun": "runners.launchers.horovodrun:HorovodrunLauncher",
    "srun": "runners.launchers.srun:SrunLauncher",
}


def get(name: str) -> Launcher:
    module, _, cls = LAUNCHERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)()


__all__ = ["LAUNCHERS", "LaunchSpec", "Launcher", "get", "launch_spec"]
