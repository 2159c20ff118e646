"""Runtimes that are Slurm SPANK plugins (Pyxis, the CSCS Container Engine): srun itself starts
the containers, so their options go on srun's own command line and ranks run `bench` directly.

They pair with the `srun` launcher: `benchrun run --runtime pyxis [--launcher srun -n N]` gives

    srun --ntasks N --kill-on-bad-exit=1 --distribution=cyclic <the runtime's srun options> bench ...

Whether the plugin is loaded is read from `srun --help`, which lists a plugin's options.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from abc import abstractmethod
from pathlib import Path

from benchmarks.errors import UsageError

from .base import Runtime

LAUNCHER = "srun"


@functools.lru_cache(maxsize=None)
def srun_help(srun: str) -> str:
    try:
        result = subprocess.run([srun, "--help"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout + result.stderr


class SlurmPluginRuntime(Runtime):
    binary = "srun"
    plugin_option: str  # an option only the plugin adds to srun (seen in `srun --help`)
    plugin_name: str  # for messages: "the Pyxis SPANK plugin"
    passes_host_env = True  # the task's environment (SLURM_*, PMI_*) is the container's

    def available(self) -> bool:
        srun = shutil.which(self.binary)
        return srun is not None and self.plugin_option in srun_help(srun)

    def require(self) -> None:
        if shutil.which(self.binary) is None:
            raise UsageError(f"runtime {self.name!r} needs 'srun' (Slurm), which is not on PATH")
        if not self.available():
            raise UsageError(f"runtime {self.name!r} needs {self.plugin_name} ('srun --help' shows no {self.plugin_option})")

    @abstractmethod
    def srun_options(self, spec, host_dir: Path) -> list[str]:
        """srun's options that start this run's containers (spec: the run's ContainerSpec)."""

    def program(self, spec) -> list[str]:
        """What each task runs inside its container."""
        return ["bench"]

    def write_run_files(self, spec, host_dir: Path) -> None:
        """Files srun_options() names, written into the run's host directory before srun starts."""

    def run_files_text(self, spec, host_dir: Path) -> str:
        """write_run_files()'s files as shell comments (for --dry-run, which writes nothing)."""
        return ""

    def mount_option(self, mount) -> list[str]:
        raise NotImplementedError  # not used: srun_options() spells the mounts
