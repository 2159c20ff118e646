"""Runtimes that are Slurm SPANK plugins (Pyxis, the CSCS Container Engine): srun itself starts
the containers, so their options go on srun's own command line (the `srun` launcher's, which every
run of theirs goes through) and ranks run `bench` directly. Whether the plugin is loaded is read
from `srun --help`, which lists a plugin's options.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from abc import ABC, abstractmethod
from pathlib import Path

from benchmarks.core.errors import UsageError

from .base import Command, Invocation, RunPlan, Runtime, env_and_argv


@functools.lru_cache(maxsize=None)
def srun_help(srun: str) -> str:
    try:
        result = subprocess.run([srun, "--help"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout + result.stderr


class SlurmPluginRuntime(Runtime, ABC):
    binary = "srun"
    launcher = "srun"
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

    def plan(self, spec, host_dir: Path) -> RunPlan:
        """srun starts the containers (its options, and the files they name); each task runs `bench` in one."""
        bench = self.command(spec.image, ["bench"], env=spec.env)
        return RunPlan(bench=bench, typed=bench, launcher_options=self.srun_options(spec, host_dir),
                       files=self.run_files(spec, host_dir))

    def slots(self, run: Invocation) -> Command:
        """What a task runs inside the container srun started: the program, fixed values set with `env K=V`."""
        return Command(command=env_and_argv(self, run.env, run.argv)[1])

    @abstractmethod
    def srun_options(self, spec, host_dir: Path) -> list[str]:
        """srun's options that start this run's containers (spec: the run's ContainerSpec)."""

    def run_files(self, spec, host_dir: Path) -> dict[Path, str]:
        """Files srun_options() names, written into the run's host directory before srun starts."""
        return {}
