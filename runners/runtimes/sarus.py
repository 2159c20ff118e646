"""`sarus` (legacy: CSCS retired Sarus; its Alps systems run the Container Engine, see cscs_ce.py):
`sarus run [--mpi] --mount=type=bind,source=S,destination=D,readonly --workdir=DIR IMAGE CMD`.

The host environment passes in; fixed values are set with `env K=V` inside. GPUs: the NVIDIA hook
activates from CUDA_VISIBLE_DEVICES (no flag). Images: `sarus pull`, or `sarus load TAR NAME` from
`docker save`, run as `load/library/NAME`."""

from __future__ import annotations

from .shifter import ShifterNgRuntime


class SarusRuntime(ShifterNgRuntime):
    name = "sarus"
    binary = "sarus"
    legacy = "retired at CSCS, replaced by the Container Engine (--runtime cscs-ce)"

    def workdir_option(self, workdir: str) -> list[str]:
        return [f"--workdir={workdir}"]
