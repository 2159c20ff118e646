"""`podman`: Docker's CLI spelling; images come from the local Docker engine when Podman lacks them.

Podman 4.3 as root on our hosts needs raised ulimits (and runc, not crun: see docs/runtimes.md)."""

from __future__ import annotations

import shutil
import subprocess

from benchmarks.core.errors import UsageError

from .base import DockerCliRuntime, last_line, local_docker_id, run_quiet, safe_name
from .image_store import EngineCopy, ImageStore, tmp_lock


class PodmanRuntime(DockerCliRuntime):
    name = "podman"
    privilege = "rootless when run as a user (user namespaces), no daemon"
    install_hint = "scripts/ensure-packages.sh podman runc"
    binary = "podman"

    def base_options(self, image: str) -> list[str]:
        return [*super().base_options(image), "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]

    def gpu_options(self) -> list[str]:
        return ["--device", "nvidia.com/gpu=all"]  # CDI, as the NVIDIA Container Toolkit documents for Podman

    def image_id(self, image: str) -> str | None:
        found = run_quiet([self.executable(), "image", "inspect", "--format", "{{.Id}}", image])
        return found.stdout.strip().removeprefix("sha256:") if found.returncode == 0 else None

    def import_image(self, image: str) -> str:
        """Podman's own copy while it is the local Docker engine's image (`docker save | podman load` keeps
        the id), else `docker save IMAGE | podman load` (ImageStore): a rebuilt Docker image is loaded again,
        never run from a stale copy."""
        docker_id = (local_docker_id(image) or "").removeprefix("sha256:") or None
        if docker_id is None:
            if self.image_id(image) is not None:
                return image
            raise UsageError(f"image {image!r} not found by podman, nor in a local Docker engine to load it from")
        copy = EngineCopy(tmp_lock(f"podman-{safe_name(image)}"), reads=lambda: self.image_id(image),
                          removes=self.remove_if_untagged)
        ImageStore(copy).materialise(docker_id, lambda: self.load(image))
        return image

    def load(self, image: str) -> None:
        """`docker save IMAGE | podman load`: the load names the new copy itself (its own publish)."""
        save = subprocess.Popen([shutil.which("docker"), "save", image], stdout=subprocess.PIPE,
                                stdin=subprocess.DEVNULL)
        load = subprocess.run([self.executable(), "load"], stdin=save.stdout, capture_output=True, text=True)
        save.stdout.close()
        if save.wait() != 0 or load.returncode != 0:
            raise UsageError(f"docker save {image} | podman load failed: {last_line(load.stderr)}")

    def remove_if_untagged(self, image_id: str) -> None:
        """The copy a rebuilt image replaced, once the load moved its name away (a few GB per rebuild
        otherwise); kept while another name or a container still uses it."""
        tags = run_quiet([self.executable(), "image", "inspect", "--format", "{{len .RepoTags}}", image_id])
        if tags.returncode == 0 and tags.stdout.strip() == "0":
            run_quiet([self.executable(), "rmi", image_id], timeout=300)  # refused while a container uses it
