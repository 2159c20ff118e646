"""Shifter, in its two forms (docs/runtimes.md, "Shifter" and "Legacy").

`shifter` (NERSC; checked against a build of Shifter 22.02): `shifter --image=docker:IMAGE
[--module=gpu,mpich] --volume=... --workdir=... [env K=V] bench ...`. Inside a job whose image the Slurm
plugin set (`salloc|sbatch --image=...`), with no --image given to benchrun, the job's image is used and no
--image is written. The host environment passes in. Shifter refuses to run as root.

`shifter-ng` (legacy: CSCS's Shifter-NG, Sarus's predecessor, retired): `shifter load TAR NAME` once, then
`shifter run [--mpi] --mount=type=bind,... load/library/NAME CMD`, the mission's `shifter run ... bench`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from benchmarks.core.errors import UsageError

from .base import Command, Invocation, Mount, Runtime, run_quiet

IMAGE_TYPES = ("docker", "id", "local")


def typed_image(image: str) -> str:
    """`TYPE:TAG` as Shifter's --image takes it; a bare name is a Docker image."""
    kind, sep, rest = image.partition(":")
    if sep and kind in IMAGE_TYPES:
        if not rest:
            raise UsageError(f"image {image!r}: nothing after {kind}:")
        return image
    return f"docker:{image}"


def job_image(environ: Mapping[str, str] = os.environ) -> str | None:
    """The image the Slurm plugin set for this job (`--image=TYPE:TAG` on salloc/sbatch), if any."""
    for prefix in ("", "SLURM_SPANK_"):
        kind, tag = environ.get(f"{prefix}SHIFTER_IMAGETYPE"), environ.get(f"{prefix}SHIFTER_IMAGE")
        if kind and tag:
            return f"{kind}:{tag}"
    return None


class ShifterRuntime(Runtime):
    name = "shifter"
    privilege = "a setuid-root helper, installed by the site"
    binary = "shifter"
    passes_host_env = True

    def require(self) -> None:
        super().require()
        if os.geteuid() == 0:
            raise UsageError("runtime 'shifter' cannot run as root (Shifter refuses: 'attempted to run as root'): "
                             "run benchrun as a regular user")

    def default_image(self, framework_image: str) -> str:
        """Inside a job whose image the Slurm plugin set, that image; else the framework's."""
        return job_image() or framework_image

    def import_image(self, image: str) -> str:
        return typed_image(image)  # the site's image gateway holds the images (shifterimg pull)

    def slots(self, run: Invocation) -> Command:
        command = super().slots(replace(run, gpus=False, mpi=False))
        modules = [m for m, wanted in (("gpu", run.gpus), ("mpich", run.mpi)) if wanted]
        command["program_options"] = [f"--module={','.join(modules)}"] if modules else []  # one option, both modules
        return command

    def base_options(self, image: str) -> list[str]:
        typed = typed_image(image)
        return [] if typed == job_image() else [f"--image={typed}"]  # plugin form: `srun shifter bench`

    def mount_option(self, mount: Mount) -> list[str]:
        return [f"--volume={mount.source}:{mount.target}" + (":ro" if mount.readonly else "")]

    def workdir_option(self, workdir: str) -> list[str]:
        return [f"--workdir={workdir}"]

    def image_option(self, image: str) -> list[str]:
        return []  # named in base_options (--image=), or the job's


class ShifterNgRuntime(Runtime):
    """Legacy: CSCS retired Shifter-NG (then Sarus); kept for the mission's `shifter run ... bench`."""

    name = "shifter-ng"
    binary = "shifter"
    privilege = "a setuid-root helper, installed by the site"
    subcommand = ("run",)
    passes_host_env = True
    legacy = "retired at CSCS (Sarus, then the Container Engine replaced it)"
    library = "load/library/"

    def gpu_options(self) -> list[str]:
        return []  # the GPU hook activates from CUDA_VISIBLE_DEVICES, set by Slurm's --gres

    def mpi_options(self) -> list[str]:
        return ["--mpi"]

    def mount_option(self, mount: Mount) -> list[str]:
        ro = ",readonly" if mount.readonly else ""
        return [f"--mount=type=bind,source={mount.source},destination={mount.target}{ro}"]

    def import_image(self, image: str) -> str:
        """`docker save IMAGE` to a tarball, `shifter load TAR NAME` (skipped when `shifter images` lists it)."""
        if image.startswith(self.library):
            return image
        name = image.split("/")[-1].replace(":", "-")
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
