"""`local`: no container; bench from this Python's benchmarks package, mounts resolved to host paths."""

from __future__ import annotations

import sys
from typing import Mapping, Sequence

from .base import Mount, Runtime, check_mount


class LocalRuntime(Runtime):
    name = "local"

    def prepare(self, image: str) -> str:
        return image  # no image: ignored

    def command(self, image, argv: Sequence[str], env: Mapping[str, str | None] = {}, mounts: Sequence[Mount] = (),
                workdir=None, gpus=False, name=None, mpi=False) -> list[str]:
        for mount in mounts:
            check_mount(mount)
        argv = list(argv)
        if argv[:1] == ["bench"]:
            argv = [sys.executable, "-m", "benchmarks", *argv[1:]]
        return argv
