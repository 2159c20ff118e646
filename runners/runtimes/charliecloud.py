"""`charliecloud`: unprivileged; `ch-convert -i docker IMAGE DIR` once (cached), then
`ch-run --set-env=DIR/ch/environment -b SRC:DST -c WORKDIR DIR -- CMD`.

ch-run passes the host environment in (minus the host's Python settings, unset here) and runs
CMD as the caller; binds are read-write in 0.31 (no read-only flag) and their targets must exist
in the image (data goes to /mnt/0). ch-run needs $USER."""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
from pathlib import Path

from benchmarks.core.errors import UsageError

from .base import Mount, Runtime, docker_image_id
from .image_store import ImageStore, PathCopy

STORE_ENV = "DLBENCH_CH_DIR"
DEFAULT_STORE = "/var/tmp/dlbench-charliecloud"


class CharliecloudRuntime(Runtime):
    name = "charliecloud"
    privilege = "unprivileged (user namespaces), no daemon"
    install_hint = "scripts/ensure-packages.sh charliecloud"
    binary = "ch-run"
    passes_host_env = True

    def import_image(self, image: str) -> str:
        """Convert the local Docker image to a directory once per Docker image id (ImageStore)."""
        if shutil.which("ch-convert") is None:
            raise UsageError("runtime 'charliecloud' needs 'ch-convert', which is not on PATH")
        if os.path.isdir(image) and os.path.isfile(os.path.join(image, "ch", "environment")):
            return os.path.abspath(image)  # already a Charliecloud image directory
        image_id = docker_image_id(image, "ch-convert -i docker needs it")
        target = Path(os.environ.get(STORE_ENV) or DEFAULT_STORE) / image.replace("/", "%").replace(":", "+")
        copy = PathCopy(target, target / "ch" / "dlbench-image-id")

        def build() -> None:
            # ch-convert's own scratch (the image's tar, ~its size) beside the partial, not in /var/tmp: a conversion that
            # never finished left 9 GB there; a leftover of one is removed by the next build, under the store's lock
            scratch = copy.partial.with_name(copy.partial.name + "-tmp")
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            try:
                result = subprocess.run(["ch-convert", "--tmp", str(scratch), "-i", "docker", image, str(copy.partial)],
                                        capture_output=True, text=True, env={**os.environ, **self.host_env()},
                                        stdin=subprocess.DEVNULL)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            if result.returncode != 0:
                said = (result.stderr.strip().splitlines() or [""])[-1]
                raise UsageError(f"ch-convert -i docker {image} {target} failed: {said}")

        ImageStore(copy).materialise(image_id, build)
        return str(target)

    def host_env(self) -> dict[str, str]:
        return {} if os.environ.get("USER") else {"USER": getpass.getuser()}

    def data_dir(self, host_dir: str) -> str:
        return "/mnt/0"  # bind targets must exist in the image; ch-run images have /mnt/0-9

    def base_options(self, image: str) -> list[str]:
        # In order: drop the host's Python settings, then the image's ENV (which sets its own venv).
        return ["--unset-env=PYTHONPATH", "--unset-env=PYTHONHOME", "--unset-env=VIRTUAL_ENV",
                f"--set-env={image}/ch/environment"]

    def gpu_options(self) -> list[str]:
        return []  # host libraries are injected once per image with ch-fromhost --nvidia

    def mpi_options(self) -> list[str]:
        return []  # hybrid model: srun/mpirun start ch-run per rank, PMI passes through

    def env_option(self, key: str, value: str | None) -> list[str]:
        return [f"--set-env={key}={value}"]

    def mount_option(self, mount: Mount) -> list[str]:
        return ["-b", f"{mount.source}:{mount.target}"]

    def workdir_option(self, workdir: str) -> list[str]:
        return ["-c", workdir]

    def image_option(self, image: str) -> list[str]:
        return [image, "--"]
