"""Shifter, in its two forms.

`shifter` (NERSC): `shifter --image=docker:IMAGE --volume=SRC:DST [--module=gpu] [--module=mpich] CMD`;
images come from the image gateway (`shifterimg pull`). The host environment passes in;
fixed values are set with `env K=V` inside. The documented --volume syntax has no read-only flag.

`shifter-ng` (CSCS, Sarus's predecessor): `shifter load TAR NAME` once, then
`shifter run [--mpi] --mount=type=bind,source=S,destination=D[,readonly] load/library/NAME CMD`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from benchmarks.errors import UsageError

from .base import Mount, Runtime, run_quiet


class ShifterRuntime(Runtime):
    name = "shifter"
    binary = "shifter"
    passes_host_env = True

    def gpu_options(self) -> list[str]:
        return ["--module=gpu"]

    def mpi_options(self) -> list[str]:
        return ["--module=mpich"]

    def mount_option(self, mount: Mount) -> list[str]:
        return [f"--volume={mount.source}:{mount.target}"]

    def image_and_command(self, image: str, argv: list[str]) -> list[str]:
        return [f"--image=docker:{image}", *argv]


class ShifterNgRuntime(Runtime):
    name = "shifter-ng"
    binary = "shifter"
    subcommand = ("run",)
    passes_host_env = True
    library = "load/library/"

    def gpu_options(self) -> list[str]:
        return []  # the GPU hook activates from CUDA_VISIBLE_DEVICES, set by Slurm's --gres

    def mpi_options(self) -> list[str]:
        return ["--mpi"]

    def mount_option(self, mount: Mount) -> list[str]:
        ro = ",readonly" if mount.readonly else ""
        return [f"--mount=type=bind,source={mount.source},destination={mount.target}{ro}"]

    def loaded_name(self, image: str) -> str:
        return image.split("/")[-1].replace(":", "-")

    def import_image(self, image: str) -> str:
        """`docker save IMAGE` to a tarball, `shifter load TAR NAME` (skipped when `shifter images` lists it)."""
        name = self.loaded_name(image)
        if image.startswith(self.library):
            return image
        listed = run_quiet([self.executable(), "images"]).stdout
        if f"{self.library}{name}" not in listed and name not in listed.split():
            docker = shutil.which("docker")
            if docker is None:
                raise UsageError(f"image {image!r}: {self.name} needs it from a local Docker engine (docker save)")
            with tempfile.TemporaryDirectory(prefix="dlbench-load-") as tmp:
                tar = str(Path(tmp) / "image.tar")
                if subprocess.run([docker, "save", "-o", tar, image], stdin=subprocess.DEVNULL).returncode != 0:
                    raise UsageError(f"docker save {image} failed")
                if subprocess.run([self.executable(), "load", tar, name], stdin=subprocess.DEVNULL).returncode != 0:
                    raise UsageError(f"{self.binary} load {tar} {name} failed")
        return f"{self.library}{name}"
