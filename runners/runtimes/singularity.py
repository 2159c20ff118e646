"""`singularity`: SingularityCE `exec`. The host environment passes in by default; `--env K=V` sets more.

Images: a `.sif` file, or a local Docker image through `docker-daemon://IMAGE`. No container name,
nothing to remove; MPI is the hybrid model (`srun ... singularity exec ...`), no flag."""

from __future__ import annotations

import os

from benchmarks.errors import UsageError

from .base import Mount, Runtime


class SingularityRuntime(Runtime):
    name = "singularity"
    binary = "singularity"
    subcommand = ("exec",)
    passes_host_env = True

    def import_image(self, image: str) -> str:
        if image.endswith(".sif") and not os.path.isfile(image):
            raise UsageError(f"image file {image} does not exist")
        return image

    def gpu_options(self) -> list[str]:
        return ["--nv"]

    def mpi_options(self) -> list[str]:
        return []

    def env_option(self, key: str, value: str | None) -> list[str]:
        return ["--env", f"{key}={value}"]

    def mount_option(self, mount: Mount) -> list[str]:
        return ["-B", f"{mount.source}:{mount.target}" + (":ro" if mount.readonly else "")]

    def workdir_option(self, workdir: str) -> list[str]:
        return ["--pwd", workdir]

    def image_and_command(self, image: str, argv: list[str]) -> list[str]:
        source = image if image.endswith(".sif") or image.startswith("/") else f"docker-daemon://{image}"
        return [source, *argv]
