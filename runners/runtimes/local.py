"""`local`: no container; bench from this Python's benchmarks package, on the host's own paths."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Mapping, Sequence

from .base import Mount, Runtime, check_mount


class LocalRuntime(Runtime):
    name = "local"
    uses_image = False

    def prepare(self, image: str | None) -> None:
        return None  # no image

    def results_dir(self, host_dir: str) -> str:
        return host_dir

    def data_dir(self, host_dir: str) -> str:
        return host_dir

    def open_results(self, host_dir: Path) -> None:
        pass  # bench runs as the caller

    def bench_command(self, spec) -> list[str]:
        return [sys.executable, "-m", "benchmarks"]

    def command(self, image, argv: Sequence[str], env: Mapping[str, str | None] = {}, mounts: Sequence[Mount] = (),
                workdir=None, gpus=False, name=None, mpi=False) -> list[str]:
        for mount in mounts:
            check_mount(mount)
        argv = list(argv)
        if argv[:1] == ["bench"]:
            argv = [sys.executable, "-m", "benchmarks", *argv[1:]]
        return argv

    def mount_option(self, mount: Mount) -> list[str]:
        return []  # the host's own paths: nothing to bind
