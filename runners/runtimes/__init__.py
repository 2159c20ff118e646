"""One module per container runtime; adding one = a `Runtime` subclass + one line here."""

from __future__ import annotations

from benchmarks.core.registry import Registry

from .base import DockerCliRuntime, Mount, Runtime, forwarded_names

BARE = "local"  # no container: the host itself, and the baseline of runtime overhead
DEFAULT = BARE  # benchrun's default

RUNTIMES = Registry("runtime", {
    "local": "runners.runtimes.local:LocalRuntime",
    "docker": "runners.runtimes.docker:DockerRuntime",
    "podman": "runners.runtimes.podman:PodmanRuntime",
    "singularity": "runners.runtimes.singularity:SingularityRuntime",
    "apptainer": "runners.runtimes.apptainer:ApptainerRuntime",
    "shifter": "runners.runtimes.shifter:ShifterRuntime",
    "shifter-ng": "runners.runtimes.shifter:ShifterNgRuntime",
    "charliecloud": "runners.runtimes.charliecloud:CharliecloudRuntime",
    "sarus": "runners.runtimes.sarus:SarusRuntime",
    "enroot": "runners.runtimes.enroot:EnrootRuntime",
    "pyxis": "runners.runtimes.pyxis:PyxisRuntime",
    "cscs-ce": "runners.runtimes.cscs_ce:CscsCeRuntime",
    "udocker": "runners.runtimes.udocker:UdockerRuntime",
    "udocker-runc": "runners.runtimes.udocker:UdockerRuncRuntime",
    "podman-hpc": "runners.runtimes.podman_hpc:PodmanHpcRuntime",
    "containerd": "runners.runtimes.containerd:ContainerdRuntime",
})


def get(name: str) -> Runtime:
    return RUNTIMES.load(name)()


def uses_image(name: str) -> bool:
    """False for a runtime that runs on the host (local); an unknown name is left for get() to refuse."""
    return name not in RUNTIMES or get(name).uses_image


def available() -> list[str]:
    return [name for name in RUNTIMES if get(name).available()]


__all__ = ["BARE", "DEFAULT", "RUNTIMES", "DockerCliRuntime", "Mount", "Runtime", "available", "forwarded_names", "get",
           "uses_image"]
