"""`sarus` (CSCS): `sarus run [--mpi] --mount=type=bind,source=S,destination=D,readonly --workdir=DIR IMAGE CMD`.

The host environment passes in; fixed values are set with `env K=V` inside. GPUs: the NVIDIA hook
activates from CUDA_VISIBLE_DEVICES (no flag). Images: `sarus pull`, or `sarus load TAR NAME` from
`docker save`, run as `load/library/NAME`."""

from __future__ import annotations

from .base import Mount
from .shifter import ShifterNgRuntime


class SarusRuntime(ShifterNgRuntime):
    name = "sarus"
    binary = "sarus"

    def workdir_option(self, workdir: str) -> list[str]:
        return [f"--workdir={workdir}"]
