"""The Runtime interface: run bench inside a container (or not), one way per runtime.

Modelled on ReFrame's container platforms (docs/runtimes.md, "Design"): `prepare(image)`, `command(...)`
for one rank, `clean_up(name)`. The base class assembles the command line as named slots (`Command`) and
each runtime states only its spelling of them (the base's: "no such option"; Docker's: DockerCliRuntime);
what one run is made of is the `plan()` and `client()` a runtime returns. `local` is a Runtime too: the
host itself. Commands are argv lists, never shell strings; in `env`, None means "pass the caller's value
through" (Docker's `-e NAME`; nothing where the host environment passes in).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from benchmarks.core.errors import UsageError
from benchmarks.core.processes import CLIENT_GRACE_S

# Image references: docker names (registry/path:tag@digest) or paths to a .sif / tarball / directory.
_IMAGE = re.compile(r"^/?[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PATH_BAD = re.compile(r"[,:\s=\x00-\x1f]")  # separators of the mount syntaxes, whitespace, control chars

# Forwarded into containers by name: what ranks need from the launcher, and the CPU threading settings,
# which every runtime must see alike (Apptainer and Charliecloud pass the host's environment, Docker does
# not: a host OMP_NUM_THREADS would otherwise reach only some of the runtimes a comparison measures).
FORWARD_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
                 "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
                 "OPENBLAS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "TF_ENABLE_ONEDNN_OPTS")
FORWARD_PREFIXES = ("DLBENCH_", "SLURM_", "SLURMD_", "OMPI_", "PMI_", "PMIX_", "HOROVOD_", "OMP_", "GOMP_", "KMP_", "MKL_")


def launcher_fds(environ: Mapping[str, str]) -> tuple[int, ...]:
    """The descriptor a launcher hands its ranks by number (PMI_FD, MPICH Hydra's PMI-1 socket), if open: the
    rank wrapper keeps it open for the runtime's client, so that a rank in a container that shares the host's
    processes (Apptainer under the host's Hydra) reaches its launcher."""
    value = environ.get("PMI_FD", "")
    try:
        os.fstat(int(value))
    except (ValueError, OSError):
        return ()
    return (int(value),) if value.isdigit() else ()


def forwarded_names(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Names of the variables to forward that are present in `environ` (sorted, stable argv)."""
    return sorted(k for k in environ if k in FORWARD_NAMES or k.startswith(FORWARD_PREFIXES))


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    readonly: bool = True


def world_readable(path: str) -> bool:
    """Can a user who is neither owner nor group (the image's uid 1000) list `path`?"""
    path = Path(os.path.abspath(path))  # its parents up to, not including, /: each must be searchable
    return os.stat(path).st_mode & 0o005 == 0o005 and all(parent.stat().st_mode & 0o001 for parent in path.parents[:-1])


def check_image(image: str) -> str:
    if not image or not _IMAGE.match(image) or ".." in image.split("/"):
        raise UsageError(f"invalid image name {image!r} (letters, digits and ._/:@+- only)")
    return image


def check_name(name: str) -> str:
    if not _NAME.match(name) or len(name) > 128:
        raise UsageError(f"invalid container name {name!r}")
    return name


def check_mount(mount: Mount) -> Mount:
    for what, path in (("mount source", mount.source), ("mount target", mount.target)):
        if not os.path.isabs(path) or _PATH_BAD.search(path):
            raise UsageError(f"invalid {what} {path!r} (absolute path without , : = or whitespace)")
    if not os.path.exists(mount.source):
        raise UsageError(f"mount source {mount.source} does not exist")
    return mount


RESULTS_TARGET = "/results"  # where a container sees the run's results directory
DATA_TARGET = "/data"  # where a container sees --data-dir (read-only)

# A command line's slots, in the order they are joined. A runtime that spells a run its own way edits
# the slots by name (podman-hpc's shared run, Shifter's --module), never the argv by position.
SLOTS = ("program", "program_options", "subcommand", "name", "base", "gpu", "mpi", "env", "mounts", "workdir",
         "labels", "options", "entrypoint", "image", "command")


def known(slot: str) -> str:
    if slot not in SLOTS:
        raise KeyError(f"no slot {slot!r} in a runtime's command (slots: {', '.join(SLOTS)})")
    return slot


class Command(dict):
    """A runtime's command line as named slots (SLOTS); argv() joins them in that order."""

    def __init__(self, **slots: Sequence[str]):
        super().__init__()
        for slot, value in slots.items():
            self[slot] = value

    def __setitem__(self, slot: str, value: Sequence[str]) -> None:
        super().__setitem__(known(slot), list(value))

    def __missing__(self, slot: str) -> list[str]:
        known(slot)
        return []  # an empty slot

    def argv(self) -> list[str]:
        return [arg for slot in SLOTS for arg in self.get(slot, ())]


@dataclass(frozen=True)
class Invocation:
    """What one command line runs (Runtime.command's arguments, checked)."""

    image: str | None
    argv: list[str]
    env: Mapping[str, str | None] = field(default_factory=dict)
    mounts: Sequence[Mount] = ()
    workdir: str | None = None
    gpus: bool = False
    name: str | None = None
    mpi: bool = False
    options: Sequence[str] = ()  # --container-option: the user's own, checked by container_options()


@dataclass(frozen=True)
class Client:
    """How the rank wrapper starts and stops one rank's runtime client: a child process that is given
    the signal itself (the Docker/Podman clients forward it, so bench records 'interrupted')."""

    shared: bool = False  # the node's ranks share one container the runtime names; the wrapper execs the command
    setup_s: float = 0  # seconds a run may spend around bench (creating, removing its container): added to every grace

    @property
    def stop_grace_s(self) -> float:
        """How long the rank wrapper waits for a client it stopped (it forwards the signal to bench; udocker
        then removes its container) before it kills it."""
        return CLIENT_GRACE_S + self.setup_s

    def start(self, command: list[str], env: Mapping[str, str]) -> subprocess.Popen:
        return subprocess.Popen(command, env=env, pass_fds=launcher_fds(env))  # the launcher's descriptors kept open

    def stop(self, proc: subprocess.Popen, signum: int) -> None:
        proc.send_signal(signum)

    def exit_code(self, code: int, record: dict | None) -> int:
        """The run's exit code, given the client's and bench's record (for clients that lose bench's code)."""
        return code


@dataclass(frozen=True)
class RunPlan:
    """What a runtime makes of one run, for the launcher (or the host) to start."""

    bench: list[str]  # how each rank starts bench (benchrun's per-rank wrapper, bench on the host, bench in a plugin's container)
    typed: list[str]  # the same as a user would type it (--dry-run): the runtime's own command
    launcher_options: list[str] = field(default_factory=list)  # on the launcher's line: a Slurm plugin's container options
    files: dict[Path, str] = field(default_factory=dict)  # written before the launch (cscs-ce's EDF); --dry-run shows them


class Runtime:
    """One way to run bench (the module's docstring); the spelling hooks below say "this runtime has no
    such option" unless a runtime spells it."""

    name: str
    binary: str | None = None  # None: nothing to find (local)
    subcommand: tuple[str, ...] = ()  # e.g. ("run", "--rm") after the binary
    passes_host_env = False  # True: the host environment is visible inside by default
    removes_container = False  # a named container that must be removed after the run
    runs_as_image_user = False  # the image's user (uid 1000), not the caller, reads the mounts and writes the record
    uses_image = True  # False: runs on the host (local); no image to name or prepare
    launcher: str | None = None  # a launcher's plugin (pyxis, cscs-ce: srun's) runs every run through that launcher
    legacy: str | None = None  # why a runtime is legacy (retired where it came from); None: current
    install_hint: str | None = None  # how to get the binary, named when it is missing
    privilege: str | None = None  # how it runs without root, as `benchrun info` tells a user; None: the host (local)

    # ---- availability -------------------------------------------------------------------
    def executable(self) -> str:
        return shutil.which(self.binary) or self.binary if self.binary else ""

    def available(self) -> bool:
        return self.binary is None or shutil.which(self.binary) is not None

    def version(self) -> str | None:
        """The first line `BINARY --version` prints (each record's provenance.runtime_version); None without one."""
        if self.binary is None or not self.available():
            return None
        try:
            said = run_quiet([self.executable(), "--version"], timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        line = next((ln.strip() for ln in (said.stdout or said.stderr).splitlines() if ln.strip()), "")
        return line[:200] or None if said.returncode == 0 else None

    def require(self) -> None:
        """Refuse, in one line, a runtime that cannot run here (not installed, ...); --dry-run only notes it."""
        if not self.available():
            hint = f" ({self.install_hint})" if self.install_hint else ""
            raise UsageError(f"runtime {self.name!r} needs {self.binary!r}, which is not on PATH{hint}")

    # ---- prepare ---------------------------------------------------------------------------
    def prepare(self, image: str) -> str:
        """Make `image` runnable: check its name, require the binary, then import it (cached, idempotent).

        Returns the reference `command()` should be given (an image name, a directory, a .sif)."""
        check_image(image)
        self.require()
        return self.import_image(image)

    def import_image(self, image: str) -> str:
        """The runtime's own step (convert, load, pull); the default uses the image as it is."""
        return image

    def image_labels(self, image: str) -> dict[str, str]:
        """The prepared image's labels (io.dlbench.framework says which frameworks it holds); {}: unknown."""
        return {}

    def default_image(self, framework_image: str) -> str:
        """The image when the user names none (Shifter: the one its Slurm plugin set for the job)."""
        return framework_image

    def check_annotations(self, annotations: Mapping[str, str]) -> dict[str, str]:
        """Runtime annotations (--edf-annotation): only the CSCS Container Engine has any."""
        if annotations:
            raise UsageError(f"runtime {self.name!r} takes no EDF annotations (only cscs-ce does)")
        return {}

    def results_dir(self, host_dir: str) -> str:
        """The path bench writes its record under, for a host results directory (on the host: that one)."""
        return RESULTS_TARGET if self.uses_image else host_dir

    def data_dir(self, host_dir: str) -> str:
        """The path bench reads --data-dir from (must exist in the image for some runtimes)."""
        return DATA_TARGET if self.uses_image else host_dir

    # ---- one run -------------------------------------------------------------------------------
    def plan(self, spec, host_dir: Path) -> RunPlan:
        """The run given its ContainerSpec: each rank runs benchrun's per-rank wrapper (runners.runtimes.container)
        around command(); a user would type the command itself."""
        typed, _ = spec.command(self, ["bench"], environ={})
        return RunPlan(bench=[sys.executable, "-m", "runners.runtimes", spec.to_json(), "--", "bench"],
                       typed=[self.binary, *typed[1:]])  # `docker`, as typed, not the path found on PATH

    def client(self, spec) -> Client:
        return Client()

    # ---- the command line -----------------------------------------------------------------------
    def command(self, image: str | None, argv: Sequence[str], env: Mapping[str, str | None] = {},
                mounts: Sequence[Mount] = (), workdir: str | None = None, gpus: bool = False,
                name: str | None = None, mpi: bool = False, options: Sequence[str] = ()) -> list[str]:
        """The argv that runs `argv` (the program and its arguments) in `image`."""
        if self.uses_image:
            check_image(image)
        for key in env:
            if not _ENV_NAME.match(key):
                raise UsageError(f"invalid environment variable name {key!r}")
        if name is not None:
            check_name(name)
        run = Invocation(image, list(argv), dict(env), [check_mount(m) for m in mounts], workdir, gpus, name, mpi,
                         self.container_options(options) if options else ())
        return self.slots(run).argv()

    def slots(self, run: Invocation) -> Command:
        """The command line from the spelling hooks below, slot by slot."""
        options, argv = env_and_argv(self, run.env, run.argv)
        entrypoint = self.entrypoint_option(argv[0])
        return Command(program=[self.executable()], subcommand=self.subcommand,
                       name=self.name_options(run.name) if run.name is not None else [],
                       base=self.base_options(run.image), gpu=self.gpu_options() if run.gpus else [],
                       mpi=self.mpi_options() if run.mpi else [], env=options,
                       mounts=[arg for mount in run.mounts for arg in self.mount_option(mount)],
                       workdir=self.workdir_option(run.workdir) if run.workdir is not None else [],
                       options=run.options, entrypoint=entrypoint or [], image=self.image_option(run.image),
                       command=argv[1:] if entrypoint else argv)

    def name_options(self, name: str) -> list[str]:
        """Options that name the container (runtimes with removes_container)."""
        return []

    def base_options(self, image: str) -> list[str]:
        return []

    def gpu_options(self) -> list[str]:
        raise UsageError(f"runtime {self.name!r} has no GPU option")

    def mpi_options(self) -> list[str]:
        raise UsageError(f"runtime {self.name!r} has no MPI hook: run MPI inside the container instead")

    def env_option(self, key: str, value: str | None) -> list[str] | None:
        """Options that set `key` (None value: the caller's). None: set it with `env` inside instead."""
        return None

    def mount_option(self, mount: Mount) -> list[str]:
        """Options that bind `mount` into the container."""
        raise UsageError(f"runtime {self.name!r} binds no directories on its command line")

    def workdir_option(self, workdir: str) -> list[str]:
        return []  # no such option: bench is given absolute paths

    def container_options(self, options: Sequence[str]) -> list[str]:
        """--container-option: the user's own options for the runtime's command line, checked."""
        raise UsageError(f"runtime {self.name!r} takes no --container-option")

    def entrypoint_option(self, program: str) -> list[str] | None:
        """Options that make `program` the container's command in place of the image's ENTRYPOINT;
        None: the command runs as given, after the image."""
        return None

    def image_option(self, image: str) -> list[str]:
        return [image]

    def host_env(self) -> dict[str, str]:
        """Variables the runtime's own binary needs in its environment (not the container's)."""
        return {}

    # ---- clean up ---------------------------------------------------------------------------------
    def clean_up(self, name: str, prefix: bool = False) -> None:
        """Remove this run's container (`prefix`: every container whose name starts so), if the runtime keeps any."""

    def fault(self) -> str | None:
        """Why this runtime cannot run containers now (its daemon went away), or None; asked after a run
        that failed, so that the record blames the environment, not bench."""
        return None


def env_and_argv(runtime: Runtime, env: Mapping[str, str | None], argv: list[str]) -> tuple[list[str], list[str]]:
    """The runtime's options that set `env`, and `argv` behind `env K=V` for the values it cannot set
    itself; a pass-through variable (None) needs nothing where the host environment passes in."""
    options, inside = [], []
    for key, value in env.items():
        if value is None and runtime.passes_host_env:
            continue
        option = runtime.env_option(key, value)
        if option is None:
            inside.append(f"{key}={value}")
        else:
            options += option
    return options, ["env", *inside, *argv] if inside else list(argv)


REFUSED_OPTIONS = {  # --container-option flags a Docker-CLI runtime refuses, and why
    **dict.fromkeys(("--privileged", "--cap-add", "--security-opt", "--device", "--device-cgroup-rule", "--userns"),
                    "no privileges beyond the run's own"),
    **dict.fromkeys(("--volume", "--mount", "--volumes-from", "--tmpfs"), "benchrun mounts the data, read-only"),
    **dict.fromkeys(("--name", "--rm", "--entrypoint", "--network", "--net"), "benchrun sets it"),
}


class DockerCliRuntime(Runtime):
    """The Docker CLI's spelling (docker, podman and their relatives): named containers removed
    after the run, `-e`, `-v SRC:DST[:ro]`, `-w`, the image's ENTRYPOINT replaced by bench."""

    subcommand = ("run", "--rm")
    removes_container = True
    runs_as_image_user = True

    def name_options(self, name: str) -> list[str]:
        return ["--name", name]

    def base_options(self, image: str) -> list[str]:
        return ["--network=host", "--ipc=host"]  # ranks talk over loopback; DataLoader shared memory

    def gpu_options(self) -> list[str]:
        return ["--gpus", "all"]

    def env_option(self, key: str, value: str | None) -> list[str]:
        return ["-e", key if value is None else f"{key}={value}"]

    def mount_option(self, mount: Mount) -> list[str]:
        return ["-v", f"{mount.source}:{mount.target}" + (":ro" if mount.readonly else "")]

    def workdir_option(self, workdir: str) -> list[str]:
        return ["-w", workdir]

    def container_options(self, options: Sequence[str]) -> list[str]:
        """One `--flag[=value]` token each (a separate value would be read as the image); options that would
        undo what the run relies on (its mounts read-only, its name, its network, its entrypoint) or grant
        privileges are refused. What they are for: a site's or a planted limit (--shm-size, --cpus, --ipc)."""
        for option in options:
            flag = option.split("=", 1)[0]
            if not re.fullmatch(r"--[a-z][a-z0-9-]*(=\S*)?", option):
                raise UsageError(f"--container-option {option!r}: give one --flag or --flag=value token")
            if flag in REFUSED_OPTIONS:
                raise UsageError(f"--container-option {option!r}: {flag} is refused ({REFUSED_OPTIONS[flag]})")
        return list(options)

    def entrypoint_option(self, program: str) -> list[str]:
        return ["--entrypoint", program]  # the images' ENTRYPOINT is bench: state it

    def has_image(self, image: str) -> bool:
        return run_quiet([self.executable(), "image", "inspect", image]).returncode == 0

    def import_image(self, image: str) -> str:
        if not self.has_image(image):
            raise UsageError(f"image {image!r} not found by {self.name} (build it: make images)")
        return image

    def clean_up(self, name: str, prefix: bool = False) -> None:
        """Best effort: with the daemon gone nothing can be removed now (one that restarts removes
        the --rm containers it finds running; fault() says so)."""
        pattern = f"^/?{name}" + ("" if prefix else "$")
        try:
            found = run_quiet([self.executable(), "ps", "-aq", "--filter", f"name={pattern}"]).stdout.split()
            if found:
                run_quiet([self.executable(), "rm", "-f", *found])
        except subprocess.TimeoutExpired:  # a daemon that hangs
            pass


def safe_name(image: str) -> str:
    """An image reference as a file or container name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", image).strip("-.")


def last_line(text: str) -> str:
    """The message a failed tool ended with (its last non-empty line)."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "(no message)"


def local_docker_id(image: str) -> str | None:
    """The local Docker engine's id of `image` ("sha256:..."), or None (no docker, no such image)."""
    docker = shutil.which("docker")
    found = run_quiet([docker, "image", "inspect", "--format", "{{.Id}}", image]) if docker else None
    return found.stdout.strip() if found is not None and found.returncode == 0 else None


def docker_image_id(image: str, why: str) -> str:
    """The local Docker engine's id of `image`; a one-line error saying `why` it is needed when it has none."""
    found = local_docker_id(image)
    if found is None:
        raise UsageError(f"image {image!r} not found in the local Docker engine ({why})")
    return found


def run_quiet(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
