"""`horovodrun`: Horovod's launcher, over gloo by default (`--extra=--mpi` for MPI)."""

from __future__ import annotations

import re
import socket

from .base import Launcher, LaunchSpec, how_it_ended

# horovodrun ends every rank once one exits non-zero and names it. A rank killed by a signal reports nothing
# and process 0, stopped by horovodrun, can only record SIGTERM: this names it.
FIRST_FAILED = re.compile(r"Process name: (\d+)\s+Exit code: (-?\d+)")


class HorovodrunLauncher(Launcher):
    name = "horovodrun"
    binary = "horovodrun"
    install_hint = "make images-horovod (horovodrun is in the Horovod images, not on the host)"

    def command(self, spec: LaunchSpec) -> list[str]:
        argv = [self.executable(), "-np", str(spec.processes), "-H", spec.host_slots(spec.hosts or ["localhost"])]
        if "--mpi" not in spec.extra:
            argv.append("--gloo")
        return [*argv, *spec.extra, *spec.bench, *spec.run.to_argv()]

    def fault(self) -> str | None:
        found = FIRST_FAILED.search("\n".join(self.said))
        if found is None:
            return None
        rank, status = int(found.group(1)), int(found.group(2))
        if status <= 128:  # it exited: its own record, or its report to process 0, says why
            return None
        who = "process 0" if rank == 0 else f"rank {rank}"
        ended = how_it_ended(128 - status)  # a shell's status: 137 is SIGKILL
        return f"{who} {ended} on {socket.gethostname()}; horovodrun stopped the others"
