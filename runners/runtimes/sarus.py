"""`sarus` (legacy: CSCS retired Sarus; its Alps systems run the Container Engine, see cscs_ce.py):
shifter-ng's command line (`sarus run [--mpi] --mount=type=bind,...`) with `--workdir=DIR`."""

from __future__ import annotations

from .shifter import ShifterNgRuntime


class SarusRuntime(ShifterNgRuntime):
    name = "sarus"
    privilege = "a setuid-root helper, installed by the site"
    binary = "sarus"
    legacy = "retired at CSCS, replaced by the Container Engine (--runtime cscs-ce)"

    def workdir_option(self, workdir: str) -> list[str]:
        return [f"--workdir={workdir}"]
