"""`pyxis` (NVIDIA's SPANK plugin for Enroot): srun starts each task in the container, given
`--container-image=FILE.sqsh --container-name=NAME --no-container-entrypoint --container-mounts=...`.

The image is Enroot's squashfs, imported once per Docker image id (a .sqsh is used as it is), so no node
pulls from a registry. The task's environment passes in; fixed values are set with `env K=V`. The
container is named for the run (all local tasks share it); Pyxis removes it when the job ends. GPUs and
MPI are srun's own options (--launcher-arg): docs/runtimes.md, "Pyxis".
"""

from __future__ import annotations

import shutil
from pathlib import Path

from benchmarks.core.errors import UsageError

from .base import Mount, check_mount, check_name
from .enroot import squashfs_for
from .slurm_plugin import SlurmPluginRuntime


class PyxisRuntime(SlurmPluginRuntime):
    name = "pyxis"
    privilege = "a Slurm plugin running Enroot, unprivileged"
    plugin_option = "--container-image"
    plugin_name = "the Pyxis SPANK plugin"

    def import_image(self, image: str) -> str:
        if image.endswith(".sqsh"):
            return str(squashfs_for(image, ""))
        enroot = shutil.which("enroot")
        if enroot is None:
            raise UsageError(f"runtime 'pyxis' imports {image!r} with 'enroot import dockerd://', but 'enroot' is "
                             f"not on PATH here (give a .sqsh file as --image)")
        return str(squashfs_for(image, enroot))

    def srun_options(self, spec, host_dir: Path) -> list[str]:
        options = [f"--container-image={spec.image}"]
        if spec.name is not None:
            options.append(f"--container-name={check_name(spec.name)}")
        options.append("--no-container-entrypoint")
        options += [self.mount_option(check_mount(m))[0] for m in spec.mounts]
        if spec.workdir is not None:
            options.append(f"--container-workdir={spec.workdir}")
        return options

    def mount_option(self, mount: Mount) -> list[str]:
        return [f"--container-mounts={mount.source}:{mount.target}" + (":ro" if mount.readonly else "")]
