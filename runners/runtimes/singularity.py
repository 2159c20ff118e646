"""`singularity`: SingularityCE `exec`. The host environment passes in by default; `--env K=V` sets more.

Images: a `.sif` file (`singularity build dlbench-torch.sif docker-daemon://dlbench-torch:latest`,
or Singularity.def), or a local Docker image through `docker-daemon://IMAGE`. No container name,
nothing to remove; MPI is the hybrid model (`srun ... singularity exec ...`), no flag.
GPUs (--gpus): `--nv` binds the host's driver libraries; where the host has a CDI specification for
NVIDIA GPUs (`nvidia-ctk cdi generate`, in /etc/cdi or /var/run/cdi), `--device nvidia.com/gpu=all`
instead (Apptainer 1.5; SingularityCE 4.5 applies CDI devices in its OCI mode)."""

from __future__ import annotations

import os

from benchmarks.errors import UsageError

from .base import Mount, Runtime

CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
CDI_GPU = "nvidia.com/gpu"


def cdi_gpus_available(dirs=None) -> bool:
    """Does a CDI specification (YAML or JSON) on this host declare NVIDIA GPUs?"""
    for directory in CDI_DIRS if dirs is None else dirs:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            if name.endswith((".yaml", ".yml", ".json")):
                try:
                    text = open(os.path.join(directory, name), encoding="utf-8", errors="replace").read()
                except OSError:
                    continue
                if CDI_GPU in text:  # `kind: nvidia.com/gpu`
                    return True
    return False


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
        return ["--device", f"{CDI_GPU}=all"] if cdi_gpus_available() else ["--nv"]

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
