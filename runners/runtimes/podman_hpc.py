"""`podman-hpc` (NERSC, Perlmutter's primary runtime): Podman with images squashed onto the file system.

A local Docker image is imported once per image id (pull docker-daemon:, migrate, rmi: runs use the
squashed, read-only copy); an image podman-hpc holds unsquashed is refused. Runs speak the Docker CLI.
`--mpi` loads podman-hpc's MPI module, which makes a shared run: one container per node, named by
podman-hpc after the ranks' parent (so the rank wrapper execs podman-hpc), each rank `podman exec`'d into
it, labelled dlbench.run=NAME so that benchrun can remove what a killed run left. docs/runtimes.md,
"podman-hpc (NERSC)", says why each step is so, and how scripts/install-podman-hpc.sh installs it.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from benchmarks.core.errors import UsageError
from benchmarks.core.processes import CLIENT_GRACE_S, children, command_lines, terminate

from .base import Client, Command, DockerCliRuntime, Invocation, last_line, local_docker_id, run_quiet
from .image_store import EngineCopy, ImageStore, tmp_lock

LABEL = "dlbench.run"
IMPORT_TIMEOUT_S = 3600
MIGRATE_HINT = "podman-hpc migrate needs a static mksquashfs >= 4.6 as its mksquashfs_bin: scripts/install-podman-hpc.sh"
STORE_INDEXES = ("overlay-images/images.json", "overlay-layers/layers.json")


def squash_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """Where podman-hpc keeps squashed images: $SQUASH_DIR, else $SCRATCH/storage (its own rule)."""
    return Path(environ.get("SQUASH_DIR") or f"{environ.get('SCRATCH', '/tmp')}/storage")


class SquashSnapshot:
    """The squash store as it was before an import, to put back if the import fails half-way:
    entries created since are removed (a half-written squashfs among them), the indexes restored."""

    def __init__(self, root: Path):
        self.root = root
        self.paths = self._paths()
        self.indexes = {rel: (root / rel).read_bytes() for rel in STORE_INDEXES if (root / rel).is_file()}

    def _paths(self) -> set[str]:
        found = set()
        for top, dirs, files in os.walk(self.root):
            found.update(os.path.relpath(os.path.join(top, n), self.root) for n in (*dirs, *files))
        return found

    def restore(self) -> None:
        for rel in sorted(self._paths() - self.paths, key=len, reverse=True):
            path = self.root / rel
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        for rel, content in self.indexes.items():
            (self.root / rel).write_bytes(content)


class PodmanHpcRuntime(DockerCliRuntime):
    name = "podman-hpc"
    privilege = "rootless (Podman underneath)"
    binary = "podman-hpc"
    install_hint = "install it: eval \"$(scripts/install-podman-hpc.sh)\""

    def gpu_options(self) -> list[str]:
        return ["--gpu", "--nccl"]  # podman-hpc's modules: the host's NVIDIA libraries/devices, its NCCL setup

    def mpi_options(self) -> list[str]:
        return ["--mpi"]

    def client(self, spec) -> Client:
        return Client(shared=True) if spec.mpi else super().client(spec)  # the MPI module's: one container per node

    def slots(self, run: Invocation) -> Command:
        if not run.mpi:
            return super().slots(run)
        # Shared run: podman-hpc names the container and starts it with `sleep infinity` (so no
        # ENTRYPOINT: `--entrypoint=`), then `podman exec`s argv; the label names it for clean-up.
        command = super().slots(replace(run, name=None))
        command["base"] = []  # the MPI module sets host network and IPC itself (a second --network is refused)
        command["labels"] = ["--label", f"{LABEL}={run.name}"] if run.name else []
        command["entrypoint"] = ["--entrypoint="]
        command["command"] = run.argv
        return command

    # ---- images ---------------------------------------------------------------------
    def squashed_id(self, image: str) -> str | None:
        """The id of the squashed (migrated, read-only) image `image` names, if there is one."""
        listed = run_quiet([self.executable(), "images", "--format", "{{.Id}} {{.ReadOnly}}", image])
        ids = [line.split()[0] for line in listed.stdout.splitlines() if line.split()[1:] == ["true"]]
        return ids[0] if listed.returncode == 0 and ids else None

    def has_image(self, image: str) -> bool:
        return run_quiet([self.executable(), "image", "exists", image]).returncode == 0

    def import_image(self, image: str) -> str:
        """The migrated image: reused while its id is the local Docker image's, else imported from Docker
        (ImageStore)."""
        docker_id = (local_docker_id(image) or "").removeprefix("sha256:") or None
        if docker_id is None:
            if self.squashed_id(image):
                return image
            if self.has_image(image):
                raise UsageError(f"image {image!r} is in podman-hpc's storage but not migrated: "
                                 f"run `podman-hpc migrate {image}` (runs use the squashed copy)")
            raise UsageError(f"image {image!r} not found: not migrated for podman-hpc (podman-hpc images) and not in "
                             f"a local Docker engine to import from (make images; or podman-hpc pull IMAGE, then migrate)")
        # One import at a time, of any image: the snapshot migrate_from_docker puts back is then exact.
        copy = EngineCopy(tmp_lock("podman-hpc-import"), reads=lambda: self.squashed_id(image),
                          removes=self.remove_if_unnamed)
        ImageStore(copy).materialise(docker_id, lambda: self.migrate_from_docker(image, docker_id))
        return image

    def remove_if_unnamed(self, squashed_id: str) -> None:
        """The squashed copy a rebuilt image replaced: migrate moves the name to the new copy and keeps the
        old one's squashfs (one more per rebuild otherwise). rmsqi deletes the squashfs of the image's top
        layer, which a rebuild that changed only labels shares, and fails half-way on a mounted one: it runs
        only for an unnamed image whose top layer no other image has, while no squashfs is mounted."""
        store = squash_dir()
        try:
            images = json.loads((store / STORE_INDEXES[0]).read_text())
        except (OSError, ValueError):
            return
        old = next((image for image in images if image.get("id") == squashed_id), None)
        if old is None or old.get("names") or squash_mounts(store) or any(
                image.get("layer") == old.get("layer") for image in images if image is not old):
            return
        run_quiet([self.executable(), "rmsqi", squashed_id], timeout=300)

    def migrate_from_docker(self, image: str, image_id: str) -> None:
        """pull docker-daemon: + migrate + rmi; on any failure the squash store is put back as it was."""
        exe = self.executable()
        store = squash_dir()
        snapshot = SquashSnapshot(store) if store.is_dir() else None
        migrated = False
        try:
            pull = run_quiet([exe, "pull", f"docker-daemon:{image}"], timeout=IMPORT_TIMEOUT_S)
            if pull.returncode != 0:
                raise UsageError(f"podman-hpc pull docker-daemon:{image} failed: {last_line(pull.stderr)}")
            migrate = run_quiet([exe, "migrate", image], timeout=IMPORT_TIMEOUT_S)
            migrated = self.squashed_id(image) == image_id
            if not migrated:  # podman-hpc migrate exits 0 even when it failed
                raise UsageError(f"podman-hpc migrate {image} made no squashed image "
                                 f"({last_line(migrate.stderr + migrate.stdout)}; {MIGRATE_HINT})")
        finally:
            if not migrated:
                if snapshot is not None:
                    snapshot.restore()
                elif store.is_dir():
                    shutil.rmtree(store, ignore_errors=True)  # podman-hpc created it for this import
            run_quiet([exe, "rmi", image], timeout=300)  # the read-write copy: runs use the squashed one

    # ---- clean-up ---------------------------------------------------------------------
    def clean_up(self, name: str, prefix: bool = False) -> None:
        """The rank's named container, or a shared run's container (labelled with the run's name);
        then, when podman-hpc has no other container, the squashfs mounts a killed run left."""
        listed = run_quiet([self.executable(), "ps", "-a", "--format", "json"])
        try:
            containers = json.loads(listed.stdout) if listed.returncode == 0 and listed.stdout.strip() else []
        except json.JSONDecodeError:
            return
        shared = [c["Id"] for c in containers if (c.get("Labels") or {}).get(LABEL) == name]
        found = shared + [c["Id"] for c in containers if c["Id"] not in shared
                          and any(n == name or (prefix and n.startswith(name)) for n in c.get("Names") or [])]
        # A shared container's ranks are SIGTERMed first, so that they record 'interrupted': a killed `podman exec`
        # client passes no signal on (podman 4), and `rm -f` alone kills them with the container.
        for container in shared:
            terminate(exec_session_processes(container), CLIENT_GRACE_S)
        if found:
            run_quiet([self.executable(), "rm", "-f", *found])
        if listed.returncode == 0 and all(c["Id"] in found for c in containers):  # no other container, starting or not
            unmount_squashes(squash_dir())


def exec_session_processes(container_id: str) -> list[int]:
    """Host pids of the processes `podman exec`'d into a container: the children of its exec sessions'
    conmon (`conmon -c CONTAINER_ID ... --exec-process-spec FILE`; the container's own has no such file).
    Found on the host, as the container's own view cannot tell them apart: podman-hpc's MPI modules run
    the shared container in the host's PID namespace (--pid=host), where `podman top` lists every process."""
    sessions = [pid for pid, argv in command_lines().items()
                if os.path.basename(argv[0]) == "conmon" and "--exec-process-spec" in argv
                and any(flag in ("-c", "--cid") and value == container_id for flag, value in zip(argv, argv[1:]))]
    return [pid for session in sessions for pid in children(session)]


def unmount_squashes(store: Path) -> None:
    """Unmount squashfuse mounts under podman-hpc's squash store. Its fuse-overlayfs-wrap mounts an
    image's squashfs at container start and leaves a helper to unmount it at the end; a run killed
    with its process group (Ctrl-C, timeout) kills that helper too, and the mount stays."""
    for mount in squash_mounts(store):
        if run_quiet(["umount", mount]).returncode != 0 and shutil.which("fusermount"):
            run_quiet(["fusermount", "-u", mount])


def squash_mounts(store: Path) -> list[str]:
    """Mount points of squashfuse mounts under the squash store."""
    import psutil

    return [mount.mountpoint for mount in psutil.disk_partitions(all=True)
            if mount.fstype.startswith("fuse.squashfuse") and mount.mountpoint.startswith(f"{store}/")]
