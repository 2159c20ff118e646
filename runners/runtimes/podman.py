"""`podman`: Docker's CLI spelling; images come from the local Docker engine when Podman lacks them.

Podman 4.3 as root on our hosts needs raised ulimits (and runc, not crun: see docs/runtimes.md)."""

from __future__ import annotations

import shutil
import subprocess

from benchmarks.errors import UsageError

from .base import DockerCliRuntime, run_quiet


class PodmanRuntime(DockerCliRuntime):
    name = "podman"
    binary = "podman"

    def base_options(self, image: str) -> list[str]:
        return [*super().base_options(image), "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]

    def gpu_options(self) -> list[str]:
        return ["--device", "nvidia.com/gpu=all"]  # CDI, as the NVIDIA Container Toolkit documents for Podman

    def has_image(self, image: str) -> bool:
        return run_quiet([self.executable(), "image", "exists", image]).returncode == 0

    def import_image(self, image: str) -> str:
        """Podman's own image if it has one, else `docker save IMAGE | podman load`."""
        if self.has_image(image):
            return image
        docker = shutil.which("docker")
        if docker is None or run_quiet([docker, "image", "inspect", image]).returncode != 0:
            raise UsageError(f"image {image!r} not found by podman, nor in a local Docker engine to load it from")
        save = subprocess.Popen([docker, "save", image], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        load = subprocess.run([self.executable(), "load"], stdin=save.stdout, capture_output=True, text=True)
        save.stdout.close()
        if save.wait() != 0 or load.returncode != 0:
            raise UsageError(f"docker save {image} | podman load failed: {load.stderr.strip().splitlines()[-1:] }")
        return image
