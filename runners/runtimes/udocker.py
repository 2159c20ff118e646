"""`udocker`: containers with nothing installed by an admin; proot (P1) mode, or runc (R1) as `udocker-runc`.

The image is loaded into udocker's repository once per Docker image id (or `.tar` made by `docker save`:
no Docker access needed). Each rank runs in its own container, created from it and then removed by the id
its name had (`udocker rm -f ID`), not `run --rm`: udocker drops a container's names before its files, so
a removal cut short would leave a nameless container nobody could tell was ours. udocker passes no host
environment: each variable's value is set with -e. `--user=root` runs bench as the caller. **Read-only data
cannot be enforced**: udocker has no read-only volume option. docs/runtimes.md, "udocker".
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks.core.errors import EXIT_CODE_BY_STATUS, UsageError
from benchmarks.core.processes import group_members

from .base import (
    Client,
    Command,
    Invocation,
    Mount,
    Runtime,
    docker_image_id,
    last_line,
    launcher_fds,
    run_quiet,
    safe_name,
)
from .image_store import Copy, ImageStore

STORE_ENV = "DLBENCH_UDOCKER_STORE"  # image-id stamps and docker save's temporary tarball
LOAD_TIMEOUT_S = 3600
REMOVE_TRIES = 3  # `udocker rm -f ID` again while the id is still listed
LOADED = "loaded"  # in a load's partial: the names udocker gave the image


def store() -> Path:
    repository = Path(os.environ.get("UDOCKER_DIR") or Path.home() / ".udocker")  # where udocker itself puts it
    return Path(os.environ.get(STORE_ENV) or repository / "dlbench")


def tags_in(tar: Path) -> list[str]:
    """The repo:tag names a `docker save` tarball holds (its manifest.json); none if unreadable."""
    try:
        with tarfile.open(tar) as archive:
            manifest = json.load(archive.extractfile("manifest.json"))
        return [tag for entry in manifest for tag in entry.get("RepoTags") or []]
    except (OSError, KeyError, ValueError, TypeError, AttributeError, tarfile.TarError):
        return []


@dataclass(frozen=True)
class LoadedImage(Copy):
    """An image in udocker's repository, stamped by a file of ours in store(): the identity it was loaded
    from (a Docker image id, or a tarball's path, size and mtime), then the names udocker gave it."""

    runtime: UdockerRuntime
    key: str

    @property
    def stamp_file(self) -> Path:
        return store() / f"{self.key}.loaded"

    @property
    def partial(self) -> Path:
        return store() / f".{self.key}.partial"

    @property
    def lock(self) -> Path:
        return store() / f".{self.key}.lock"

    def read(self) -> tuple[str, list[str]]:
        """The stamp file's identity and names ("", []: none)."""
        try:
            identity, _, names = self.stamp_file.read_text().partition("\n")
        except OSError:
            return "", []
        return identity, names.split()

    def names(self) -> list[str]:
        return self.read()[1]

    def stamp(self) -> str | None:
        """The identity while udocker still has the image under its first name."""
        identity, names = self.read()
        return identity if names and self.runtime.udocker("inspect", names[0]).returncode == 0 else None

    def discard(self) -> None:
        shutil.rmtree(self.partial, ignore_errors=True)

    def publish(self, stamp: str) -> None:
        loaded = self.partial / LOADED
        loaded.write_text(f"{stamp}\n{loaded.read_text()}")
        os.replace(loaded, self.stamp_file)
        self.discard()  # the tarball


@dataclass(frozen=True)
class UdockerClient(Client):
    """udocker (Python) dies on SIGTERM while proot ignores it: the client starts in its own process group."""

    setup_s: float = 120  # each run creates its container (the image unpacked) and removes it: more host grace

    def start(self, command: list[str], env) -> subprocess.Popen:
        return subprocess.Popen(command, env=env, process_group=0,  # its own group: what a stop signals
                                pass_fds=launcher_fds(env))

    def stop(self, proc: subprocess.Popen, signum: int) -> None:
        """SIGTERM to the group but udocker itself (bench records it; proot ignores it, runc forwards it;
        udocker, spared, returns when bench has ended); SIGKILL to all of it."""
        try:
            if signum == signal.SIGKILL:
                os.killpg(proc.pid, signum)
                return
            for pid in group_members(proc.pid):
                if pid != proc.pid:
                    os.kill(pid, signum)
        except ProcessLookupError:
            pass


@dataclass(frozen=True)
class RuncClient(UdockerClient):
    """R1 without a terminal returns 1 whatever the container's exit code: the record's is the run's."""

    def exit_code(self, code: int, record: dict | None) -> int:
        return EXIT_CODE_BY_STATUS.get(record.get("status"), code) if record else code


class UdockerRuntime(Runtime):
    name = "udocker"
    privilege = "unprivileged, in user space (PRoot traces its system calls)"
    install_hint = 'eval "$(scripts/install-udocker.sh)"'
    binary = "udocker"
    removes_container = True
    subcommand = ("run",)  # the wrapper removes the container (clean_up), by id
    execmode = "P1"  # proot

    def root_option(self) -> list[str]:
        return ["--allow-root"] if os.geteuid() == 0 else []  # udocker refuses root without it

    def udocker(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return run_quiet([self.executable(), *self.root_option(), *args], timeout=timeout)

    # ---- the image ----------------------------------------------------------------
    def import_image(self, image: str) -> str:
        """The name udocker knows the image by, loaded once per Docker image id (or tarball)."""
        if image.endswith(".tar"):
            tar = Path(image).resolve()
            if not tar.is_file():
                raise UsageError(f"image tarball {image} does not exist")
            stat = tar.stat()
            return self._load(f"tar-{safe_name(str(tar))}", f"{tar} {stat.st_size} {stat.st_mtime_ns}", tar=tar)
        image_id = docker_image_id(image, "udocker loads it with docker save; or give a .tar made by docker save")
        return self._load(safe_name(image), image_id, image=image)

    def _load(self, key: str, identity: str, tar: Path | None = None, image: str | None = None) -> str:
        copy = LoadedImage(self, key)
        ImageStore(copy).materialise(identity, lambda: self._build(copy, tar, image))
        return copy.names()[0]

    def _build(self, copy: LoadedImage, tar: Path | None, image: str | None) -> None:
        """`udocker load` of the tarball (`docker save`d into the partial first, for a Docker image); the
        names it loaded are kept in the partial for publish. udocker refuses to load over a name ("tag
        already exist"): the earlier import of the image goes first, and whatever a load cut short left."""
        earlier = copy.names()
        copy.stamp_file.unlink(missing_ok=True)
        for name in earlier:
            self.udocker("rmi", "-f", name)
        copy.partial.mkdir(parents=True)
        if tar is None:
            tar = copy.partial / "image.tar"
            saved = run_quiet(["docker", "save", "-o", str(tar), image], timeout=LOAD_TIMEOUT_S)
            if saved.returncode != 0:
                raise UsageError(f"docker save {image} failed: {last_line(saved.stderr)}")
        for name in tags_in(tar):  # a load that was cut short left these without a stamp
            self.udocker("rmi", "-f", name)
        result = self.udocker("load", "-i", str(tar), timeout=LOAD_TIMEOUT_S)
        names = [line.strip() for line in result.stdout.splitlines() if ":" in line and " " not in line.strip()]
        if result.returncode != 0 or not names:
            for name in names:
                self.udocker("rmi", "-f", name)  # nothing half-loaded left behind
            raise UsageError(f"udocker load -i {image or tar} failed: {last_line(result.stderr + result.stdout)}")
        (copy.partial / LOADED).write_text(" ".join(names) + "\n")

    # ---- one rank's run --------------------------------------------------------------
    def host_env(self) -> dict[str, str]:
        return {"UDOCKER_DEFAULT_EXECUTION_MODE": self.execmode}  # the mode of the container `run` creates

    def client(self, spec) -> Client:
        return UdockerClient()

    def containers(self) -> dict[str, list[str]]:
        """Container id -> its names, from `udocker ps`."""
        found = {}
        for line in self.udocker("ps").stdout.splitlines()[1:]:  # CONTAINER-ID P M ['NAME', ...] IMAGE
            names = []
            if "[" in line:
                try:
                    names = ast.literal_eval(line[line.index("["):line.index("]") + 1])
                except (ValueError, SyntaxError):
                    pass
            if line.split():
                found[line.split()[0]] = names
        return found

    def clean_up(self, name: str, prefix: bool = False) -> None:
        """Remove this rank's container (or every one whose name starts so), by id: `udocker rm -f`
        drops the names first, so a removal that stops half-way is tried again by the id."""
        ids = [cid for cid, names in self.containers().items()
               if any(n == name or (prefix and n.startswith(name)) for n in names)]
        for _ in range(REMOVE_TRIES):
            for cid in ids:
                try:
                    self.udocker("rm", "-f", cid, timeout=300)
                except subprocess.TimeoutExpired:  # tried again, by its id
                    pass
            ids = [cid for cid in ids if cid in self.containers()]
            if not ids:
                return

    # ---- the command line ----------------------------------------------------------
    def slots(self, run: Invocation) -> Command:
        command = super().slots(run)
        command["program_options"] = self.root_option()
        return command

    def name_options(self, name: str) -> list[str]:
        return [f"--name={name}"]

    def base_options(self, image: str) -> list[str]:
        return ["--pull=never", "--nobanner", "--user=root"]  # never a registry; root: the caller (proot fakes it)

    def mpi_options(self) -> list[str]:
        return []  # hybrid model: srun/mpirun start udocker per rank; PMI variables are passed with -e

    def env_option(self, key: str, value: str | None) -> list[str]:
        return ["-e", f"{key}={os.environ.get(key, '') if value is None else value}"]  # udocker takes K=V only

    def mount_option(self, mount: Mount) -> list[str]:
        return ["-v", f"{mount.source}:{mount.target}"]  # no read-only option in udocker (see above)

    def workdir_option(self, workdir: str) -> list[str]:
        return ["-w", workdir]

    def entrypoint_option(self, program: str) -> list[str]:
        return [f"--entrypoint={program}"]  # the image's ENTRYPOINT (bench), stated


class UdockerRuncRuntime(UdockerRuntime):
    """R1: runc (rootless where the caller is not root); its exit code is lost, so the record's is used."""

    name = "udocker-runc"
    privilege = "rootless runc where the caller is not root"
    execmode = "R1"

    def client(self, spec) -> Client:
        return RuncClient()
