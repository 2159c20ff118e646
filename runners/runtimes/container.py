"""The per-rank wrapper of the hybrid model (docs/runtimes.md): `python -m runners.runtimes SPEC -- bench ARGS`,
what launchers start per rank, runs one container per rank, named `NAME-r<rank>-<pid>`, with the launcher's
variables present in the rank's environment (RANK, SLURM_*, PMI_*, ...), and removes it on exit, Ctrl-C,
SIGTERM (timeouts) or an error. A runtime whose ranks share one container per node (podman-hpc --mpi) is
exec'd instead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field

from benchmarks.core.errors import EXIT_USAGE, UsageError
from benchmarks.core.processes import StopScope, exit_code

from . import get
from .base import Mount, forwarded_names

RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "HOROVOD_RANK")


@dataclass
class ContainerSpec:
    runtime: str
    image: str  # as prepared: what Runtime.command takes
    name: str | None = None  # base name; ranks add -r<rank>-<pid>
    mounts: list[Mount] = field(default_factory=list)
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # fixed values; launcher variables are forwarded
    gpus: bool = False
    mpi: bool = False
    annotations: dict[str, str] = field(default_factory=dict)  # EDF annotations (cscs-ce)
    options: list[str] = field(default_factory=list)  # --container-option: the user's, for the runtime's command line

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "ContainerSpec":
        data = json.loads(text)
        data["mounts"] = [Mount(**m) for m in data.get("mounts", [])]
        return cls(**data)

    def command(self, runtime, argv: list[str], environ=os.environ) -> tuple[list[str], str | None]:
        """The runtime's command that runs `argv` for the rank `environ` describes, and its container's name
        (None: unnamed); a shared container carries the run's name (a label)."""
        name = None
        if self.name and runtime.removes_container:
            name = self.name if runtime.client(self).shared else rank_name(self.name, environ)
        env: dict[str, str | None] = {key: None for key in forwarded_names(environ)}
        env.update(self.env)
        return runtime.command(self.image, argv, env=env, mounts=self.mounts, workdir=self.workdir,
                               gpus=self.gpus, name=name, mpi=self.mpi, options=self.options), name


def rank_name(base: str, environ=os.environ) -> str:
    """The name of this rank's container: the base alone outside a launcher."""
    rank = next((environ[v] for v in RANK_VARS if environ.get(v, "").isdigit()), None)
    return base if rank is None else f"{base}-r{rank}-{os.getpid()}"


class _Stop(Exception):
    pass


def execute(spec: ContainerSpec, argv: list[str]) -> int:
    """Run argv in the container; the exit code is the container command's (128+N for a signal)."""
    runtime = get(spec.runtime)
    client = runtime.client(spec)
    command, name = spec.command(runtime, argv)
    env = {**os.environ, **runtime.host_env()}
    if client.shared:
        # The node's ranks must have one parent (podman-hpc names the shared container after it);
        # the runtime removes that container, benchrun whatever a killed run left (Runtime.clean_up).
        os.execvpe(command[0], command, env)
    stop = StopScope(_Stop, signals=(signal.SIGTERM,)).install()  # Ctrl-C is Python's KeyboardInterrupt
    proc = None
    try:
        proc = client.start(command, env)
        return exit_code(proc.wait())
    except (KeyboardInterrupt, _Stop):
        if proc is not None and proc.poll() is None:
            client.stop(proc, signal.SIGTERM)  # the client forwards it: bench records 'interrupted'
            try:
                proc.wait(timeout=client.stop_grace_s)  # then the container is removed by force
            except (subprocess.TimeoutExpired, KeyboardInterrupt, _Stop):
                client.stop(proc, signal.SIGKILL)
        return 130
    finally:
        stop.restore()
        if name is not None:
            runtime.clean_up(name)


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m runners.runtimes SPEC_JSON -- PROGRAM [ARGS...]", file=sys.stderr)
        return EXIT_USAGE
    try:
        return execute(ContainerSpec.from_json(args[0]), args[2:])
    except UsageError as error:  # e.g. a rank's environment the runtime cannot express: one line
        print(f"benchrun: error: {error}", file=sys.stderr)
        return EXIT_USAGE
