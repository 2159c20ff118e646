"""`singularity`: SingularityCE/Apptainer `exec` of a SIF. The host environment passes in (the rank variables
of srun/mpirun too), the host's Python settings do not: the image's bench runs, not the host's.

A local Docker image becomes a SIF once per image id (`docker save` into an OCI image layout, then `build
oci:LAYOUT`, lz4): `exec docker-daemon:IMAGE` would convert the whole image again on every run, and `build
docker-daemon:` gzips every layer on one core first. Root whose bounding set lacks CAP_SYS_RESOURCE runs in
a user namespace (`--userns`), where the default start fails. Why each step is so, GPUs (`--nv`, or CDI)
and the install: docs/runtimes.md, "Apptainer (and `singularity`)"."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from benchmarks.core.errors import UsageError

from .base import Mount, Runtime, docker_image_id, last_line, run_quiet, safe_name
from .image_store import Copy, ImageStore

CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
CDI_GPU = "nvidia.com/gpu"
SIF_DIR_ENV = "DLBENCH_SIF_DIR"
SIF_MAGIC = b"SIF_MAGIC"  # at byte 32 of every SIF, after the launch line
CAP_SYS_RESOURCE = 24
BUILD_TIMEOUT_S = 3600
BUILD_ROOM = 4  # free disk a conversion needs, in image sizes (check_room): its own peak is ~3x, and the machine writes too
FUSE = "/dev/fuse"
# mksquashfs options of the SIFs made from Docker images: lz4 builds and imports faster than gzip, for a larger
# file (docs/runtimes.md, "SIFs"); the variable overrides them.
MKSQUASHFS_ARGS_ENV = "DLBENCH_SIF_MKSQUASHFS_ARGS"
MKSQUASHFS_ARGS = "-comp lz4"
LAYOUT_COPIED = "Extracting OCI image"  # what `apptainer build oci:` says once its own copy of the layout is made
# Host settings that would make the container's Python import the host's packages.
HOST_PYTHON_ENV = ("PYTHONPATH=", "PYTHONHOME=", "PYTHONNOUSERSITE=1")
# In a user namespace (one per rank's container) UCX cannot reach a peer through /proc/PID/fd or CMA, and
# MPI_Init fails (docs/runtimes.md, MPI): UCX's own switches turn both off. A value the caller set wins.
USERNS_ENV = {"UCX_POSIX_USE_PROC_LINK": "n", "UCX_TLS": "^cma"}


def cdi_gpus_available(dirs=None) -> bool:
    """Does a CDI specification (YAML or JSON) on this host declare NVIDIA GPUs?"""
    for directory in CDI_DIRS if dirs is None else dirs:
        for spec in sorted(Path(directory).glob("*")):  # none where the directory is missing or unreadable
            if spec.name.endswith((".yaml", ".yml", ".json")):
                try:
                    if CDI_GPU in spec.read_text(encoding="utf-8", errors="replace"):  # `kind: nvidia.com/gpu`
                        return True
                except OSError:
                    pass
    return False


def bounding_caps(status: str | None = None) -> int:
    """This process's capability bounding set (CapBnd of /proc/self/status)."""
    if status is None:
        try:
            status = Path("/proc/self/status").read_text()
        except OSError:
            return 0
    for line in status.splitlines():
        if line.startswith("CapBnd:"):
            return int(line.split()[1], 16)
    return 0


def needs_userns(euid: int | None = None, caps: int | None = None) -> bool:
    """Root whose bounding set lacks CAP_SYS_RESOURCE: Apptainer's privileged start fails there."""
    euid = os.geteuid() if euid is None else euid
    caps = bounding_caps() if caps is None else caps
    return euid == 0 and not caps >> CAP_SYS_RESOURCE & 1


def is_sif_path(image: str) -> bool:
    return image.endswith(".sif") or os.path.isfile(image)


def check_sif(path: str) -> str:
    """The SIF's absolute path; a one-line refusal for a missing, unreadable or non-SIF file."""
    if not os.path.isfile(path):
        raise UsageError(f"image file {path} does not exist")
    try:
        with open(path, "rb") as sif:
            header = sif.read(64)
    except OSError as error:
        raise UsageError(f"image file {path} is not readable ({error.strerror})") from None
    if header[32:32 + len(SIF_MAGIC)] != SIF_MAGIC:
        raise UsageError(f"image file {path} is not a SIF (no SIF header): build one with apptainer build")
    return os.path.abspath(path)


def check_room(image: str, store: Path) -> None:
    """Refuse a conversion the disk cannot hold: the saved image (in the store), Apptainer's unpacked copy
    (by default under /tmp) and the SIF are all on disk at once."""
    found = run_quiet(["docker", "image", "inspect", "--format", "{{.Size}}", image])
    size = int(found.stdout.strip()) if found.returncode == 0 and found.stdout.strip().isdigit() else 0
    tmp = os.environ.get("APPTAINER_TMPDIR") or tempfile.gettempdir()
    existing = next(path for path in (store, *store.parents) if path.exists())
    free = min(shutil.disk_usage(tmp).free, shutil.disk_usage(existing).free)
    if free < BUILD_ROOM * size:
        raise UsageError(f"making a SIF of {image} ({size / 1e9:.1f} GB) needs about {BUILD_ROOM * size / 1e9:.0f} GB "
                         f"free under {tmp} and {store}; {free / 1e9:.0f} GB are: free some (docker image prune), "
                         f"or set APPTAINER_TMPDIR / {SIF_DIR_ENV} to a larger disk")


def remove_stale(store: Path) -> None:
    """Remove the SIFs that no name points at or whose Docker image is no longer tagged (earlier builds of
    rebuilt images: never used again, gigabytes each), and the names pointing at removed ones."""
    listed = run_quiet(["docker", "image", "ls", "--filter", "dangling=false", "--no-trunc", "--format", "{{.ID}}"])
    tagged = ({f"{line.removeprefix('sha256:')[:16]}.sif" for line in listed.stdout.split()}
              if listed.returncode == 0 else None)  # None: the daemon cannot say; keep what names point at
    for pointer in store.glob("*.image"):
        if tagged is not None and pointer.read_text().strip() not in tagged:
            pointer.unlink(missing_ok=True)
    wanted = {path.read_text().strip() for path in store.glob("*.image")}
    for old in store.glob("*.sif"):
        if old.name not in wanted:
            old.unlink(missing_ok=True)


def save_oci_layout(image: str, layout: Path) -> None:
    """`docker save` unpacked into `layout` as an OCI image layout with uncompressed layers, for `apptainer
    build oci:`. Docker >= 25 saves one already; the older format (manifest.json) gets its index here:
    the config's file name is its digest and its rootfs.diff_ids are the layers' (hard links, no copies)."""
    with tempfile.TemporaryFile() as errors:
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE, stderr=errors, stdin=subprocess.DEVNULL)
        try:
            untar = subprocess.run(["tar", "-x", "-C", str(layout)], stdin=save.stdout, capture_output=True, text=True,
                                   timeout=BUILD_TIMEOUT_S)
            save.stdout.close()
            save.wait(timeout=60)
        finally:
            stopped_by_us = save.poll() is None  # tar failed first, a timeout, Ctrl-C
            if stopped_by_us:
                save.kill()
                save.wait()
            save.stdout.close()
        errors.seek(0)
        said = last_line(errors.read().decode(errors="replace"))
    if save.returncode != 0 and not stopped_by_us:
        raise UsageError(f"docker save {image} failed: {said}")
    if untar.returncode != 0:
        raise UsageError(f"unpacking `docker save {image}` into {layout} failed: {last_line(untar.stderr)}")
    if (layout / "index.json").is_file():
        return
    saved = json.loads((layout / "manifest.json").read_text())[0]
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def blob(path: Path, digest: str, media_type: str) -> dict:
        if not (blobs / digest).exists():
            os.link(path, blobs / digest)
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": path.stat().st_size}

    config_path = layout / saved["Config"]
    diff_ids = json.loads(config_path.read_text())["rootfs"]["diff_ids"]
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": blob(config_path, config_path.stem, "application/vnd.oci.image.config.v1+json"),
        "layers": [blob(layout / path, diff_id.removeprefix("sha256:"), "application/vnd.oci.image.layer.v1.tar")
                   for path, diff_id in zip(saved["Layers"], diff_ids, strict=True)]}).encode()
    digest = hashlib.sha256(manifest).hexdigest()
    (blobs / digest).write_bytes(manifest)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": f"sha256:{digest}", "size": len(manifest)}]}))


def build_from_layout(argv: list[str], layout: Path) -> str | None:
    """Run `apptainer build` from an OCI layout (`oci:LAYOUT`, or a recipe bootstrapping from it); None when
    it succeeded, else its last line. Apptainer first copies the layout, then says so (LAYOUT_COPIED): the
    layout goes then, so the disk holds two copies of the image, not three."""
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace",
                          stdin=subprocess.DEVNULL) as build:
        timed_out = threading.Event()
        timer = threading.Timer(BUILD_TIMEOUT_S, lambda: (timed_out.set(), build.kill()))
        timer.start()
        said = ""
        try:
            for line in build.stderr:
                said = line if line.strip() else said  # its last line, kept without the whole output
                if LAYOUT_COPIED in line:
                    shutil.rmtree(layout, ignore_errors=True)
            build.wait()
        finally:
            timer.cancel()
            if build.poll() is None:  # Ctrl-C
                build.kill()
                build.wait()
    if build.returncode == 0:
        return None
    return f"no end after {BUILD_TIMEOUT_S} s" if timed_out.is_set() else last_line(said)


@dataclass(frozen=True)
class NamedSif(Copy):
    """The SIF an image name runs: SIFs are named by their Docker image id (tags of one image share one), and
    a pointer file per name says which SIF it runs, which is its stamp. Publishing writes the pointer; the
    SIFs no name points at any more, or whose image is no longer tagged, then go (remove_stale)."""

    store: Path
    image: str

    @property
    def pointer(self) -> Path:
        return self.store / f"{safe_name(self.image)}.image"

    @property
    def lock(self) -> Path:
        return self.store / "build.lock"  # one build at a time in the store: each needs ~3x its image on disk

    def stamp(self) -> str | None:
        try:
            sif = self.pointer.read_text().strip()
        except OSError:
            return None
        return sif if (self.store / sif).is_file() else None

    def discard(self) -> None:
        for partial in self.store.glob("*.sif.partial"):
            partial.unlink(missing_ok=True)
        for layout in self.store.glob(".*-oci-*"):
            shutil.rmtree(layout, ignore_errors=True)

    def publish(self, stamp: str) -> None:
        """The SIF built (`ID.sif.partial`, if this build made it: not where another name had) renamed into
        place, then the name pointed at it."""
        partial = self.store / f"{stamp}.partial"
        if partial.is_file():
            os.replace(partial, self.store / stamp)
        self.pointer.write_text(stamp + "\n")

    def remove(self, replaced: str | None) -> None:
        remove_stale(self.store)


class SingularityRuntime(Runtime):
    name = "singularity"
    privilege = "unprivileged (user namespaces), or setuid where the site installs it so"
    binary = "singularity"
    subcommand = ("exec",)
    passes_host_env = True
    install_hint = "install it: eval \"$(scripts/install-apptainer.sh)\", which provides apptainer and singularity"

    def require(self) -> None:
        super().require()
        if os.geteuid() != 0 and not os.access(FUSE, os.R_OK | os.W_OK):
            raise UsageError(f"runtime {self.name!r} as an unprivileged user mounts the SIF with squashfuse, which needs "
                             f"read-write {FUSE}; uid {os.geteuid()} has none (ask an admin: chmod 0666 {FUSE}, or run as root)")

    def import_image(self, image: str) -> str:
        """A SIF as it is; a Docker image as its SIF, built once per Docker image id (tags of one image share it)."""
        if is_sif_path(image):
            return check_sif(image)
        image_id = docker_image_id(image, f"{self.name} builds a SIF from it once; or give a .sif")
        cache = os.environ.get("DLBENCH_CACHE") or Path.home() / ".cache" / "dlbench"
        copy = NamedSif(Path(os.environ.get(SIF_DIR_ENV) or Path(cache) / "sif"), image)
        target = copy.store / f"{image_id.removeprefix('sha256:')[:16]}.sif"

        def build() -> None:
            if target.is_file():
                return  # made for another name of the same image
            copy.pointer.unlink(missing_ok=True)  # the name's earlier SIF goes first: a build needs ~3x the image
            remove_stale(copy.store)
            self._build(image, target)

        ImageStore(copy).materialise(target.name, build)
        return str(target)

    def _build(self, image: str, target: Path) -> None:
        """`docker save` into an OCI layout beside the SIF, then `build` into `ID.sif.partial`, which NamedSif
        publishes (or removes, with the layout, where a build stops short)."""
        check_room(image, target.parent)
        partial = target.with_suffix(".sif.partial")
        layout = Path(tempfile.mkdtemp(prefix=f".{target.stem}-oci-", dir=target.parent))
        save_oci_layout(image, layout)
        squash = os.environ.get(MKSQUASHFS_ARGS_ENV, MKSQUASHFS_ARGS)
        said = build_from_layout([self.executable(), "build", "--force", "--disable-cache", "--mksquashfs-args",
                                  squash, str(partial), f"oci:{layout}"], layout)
        if said is not None:
            raise UsageError(f"{self.name} build {target.name} from {image} failed: {said}")
        shutil.rmtree(layout, ignore_errors=True)

    def image_labels(self, image: str) -> dict[str, str]:
        found = run_quiet([self.executable(), "inspect", "--labels", "--json", image])
        try:
            return dict(json.loads(found.stdout)["data"]["attributes"]["labels"] or {})
        except (ValueError, KeyError, TypeError):
            return {}

    def base_options(self, image: str) -> list[str]:
        userns = ["--userns"] if needs_userns() else []
        in_userns = bool(userns) or os.geteuid() != 0  # users: Apptainer without setuid always uses one
        settings = [*HOST_PYTHON_ENV, *(f"{key}={value}" for key, value in (USERNS_ENV if in_userns else {}).items()
                                        if key not in os.environ)]
        return [*userns, *(option for setting in settings for option in ("--env", setting))]

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

    def image_option(self, image: str) -> list[str]:
        # A Docker image's name (in --dry-run, before the SIF exists): the form `exec` takes, which converts on every call
        return [image if is_sif_path(image) else f"docker-daemon:{image}"]
