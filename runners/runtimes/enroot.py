"""`enroot` (NVIDIA): unprivileged containers from squashfs images, the engine under Pyxis and CSCS's CE.

A local Docker image becomes a squashfs once per image id (`enroot import dockerd://`), then a root
filesystem once per squashfs (`enroot create`), which each rank `enroot start`s. `--rc` replaces the image's
/etc/rc, which would run its ENTRYPOINT (bench) in front of our `bench`; ENROOT_LOGIN_SHELL=no keeps Debian's
/etc/profile from resetting PATH; NVIDIA_VISIBLE_DEVICES=void without --gpus keeps the NVIDIA hook off, so
a host without libnvidia-container still runs CPU benchmarks. Enroot passes no host environment: rank
variables are forwarded by name (`-e NAME`). docs/runtimes.md, "Enroot".
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

from benchmarks.core.errors import UsageError

from .base import Command, Invocation, Mount, Runtime, docker_image_id, last_line, run_quiet, safe_name
from .image_store import ImageStore, PathCopy

STORE_ENV = "DLBENCH_ENROOT_DIR"
DEFAULT_STORE = "/var/tmp/dlbench-enroot"
RC_FILE = Path(__file__).with_name("enroot-exec.rc")  # runs "$@" from $DLBENCH_WORKDIR
IMPORT_TIMEOUT_S = 3600


def gpu_environment(gpus: bool) -> dict[str, str]:
    """What the NVIDIA hook reads: every GPU with --gpus, none (hook off) otherwise."""
    if gpus:
        return {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
    return {"NVIDIA_VISIBLE_DEVICES": "void"}


def squashfs_for(image: str, enroot: str) -> Path:
    """The image as a squashfs file: a given .sqsh as it is, a Docker image imported once per image id
    (ImageStore: a failed or interrupted import leaves no squashfs behind)."""
    if image.endswith(".sqsh"):
        path = Path(image).resolve()
        if not path.is_file():
            raise UsageError(f"squashfs image {image} does not exist")
        return path
    image_id = docker_image_id(image, "enroot import dockerd:// needs it: make images, or give a .sqsh file")
    target = Path(os.environ.get(STORE_ENV) or DEFAULT_STORE) / f"{safe_name(image)}.sqsh"
    copy = PathCopy(target, target.with_suffix(".id"))

    def build() -> None:
        result = run_quiet([enroot, "import", "-o", str(copy.partial), f"dockerd://{image}"], timeout=IMPORT_TIMEOUT_S)
        if result.returncode != 0 or not copy.partial.is_file():
            raise UsageError(f"enroot import dockerd://{image} failed: {last_line(result.stderr + result.stdout)}")

    ImageStore(copy).materialise(image_id, build)
    return target


class EnrootRuntime(Runtime):
    name = "enroot"
    privilege = "unprivileged (user namespaces)"
    binary = "enroot"
    subcommand = ("start",)

    def container_name(self, squashfs: Path) -> str:
        """One root filesystem per squashfs content: a new import gets a new name."""
        stat = squashfs.stat()
        return f"dlbench-{safe_name(squashfs.stem)[:90]}-{stat.st_size:x}-{int(stat.st_mtime):x}"

    def import_image(self, image: str) -> str:
        """The name of an Enroot container holding `image` (squashfs imported and unpacked once)."""
        enroot = self.executable()
        squashfs = squashfs_for(image, enroot)
        name = self.container_name(squashfs)
        existing = run_quiet([enroot, "list"]).stdout.split()
        if name in existing:
            return name
        earlier = re.compile(re.escape(name.rsplit("-", 2)[0]) + r"-[0-9a-f]+-[0-9a-f]+")
        for stale in existing:  # earlier imports of the same image
            if earlier.fullmatch(stale):
                run_quiet([enroot, "remove", "--force", stale])
        result = run_quiet([enroot, "create", "--name", name, str(squashfs)], timeout=IMPORT_TIMEOUT_S)
        if result.returncode != 0:
            run_quiet([enroot, "remove", "--force", name])  # nothing half-unpacked left behind
            raise UsageError(f"enroot create --name {name} {squashfs} failed: {last_line(result.stderr)}")
        return name

    def slots(self, run: Invocation) -> Command:
        return super().slots(replace(run, env={**gpu_environment(run.gpus), **run.env}))

    def host_env(self) -> dict[str, str]:
        return {"ENROOT_LOGIN_SHELL": "no"}

    def base_options(self, image: str) -> list[str]:
        return ["--rc", str(RC_FILE)]

    def gpu_options(self) -> list[str]:
        return []  # the NVIDIA hook, driven by gpu_environment()

    def mpi_options(self) -> list[str]:
        return []  # hybrid model: srun/mpirun start enroot per rank; PMI variables are forwarded

    def env_option(self, key: str, value: str | None) -> list[str]:
        return ["-e", key if value is None else f"{key}={value}"]

    def mount_option(self, mount: Mount) -> list[str]:
        return ["-m", f"{mount.source}:{mount.target}" + (":x-create=auto,rbind,ro" if mount.readonly else "")]

    def workdir_option(self, workdir: str) -> list[str]:
        return ["-e", f"DLBENCH_WORKDIR={workdir}"]  # read by RC_FILE; Enroot has no --workdir
