"""`containerd`: containerd itself, through its own client `ctr`, without Docker's daemon on top.

The local Docker image is imported once per image id (kept as a label on containerd's copy, so a rebuilt
image is imported again); an image only containerd has is run as it is. Each rank runs in its own container,
removed when it ends. `ctr run` forwards its signals to bench and has no `-e NAME`: a pass-through variable's
value is read where the rank starts. Socket, namespace, GPUs: docs/runtimes.md, "containerd".
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from benchmarks.core.errors import UsageError
from benchmarks.core.processes import alive

from .base import Command, Invocation, Mount, Runtime, last_line, local_docker_id, run_quiet, safe_name
from .image_store import EngineCopy, ImageStore, tmp_lock

NAMESPACE = "dlbench"
ID_LABEL = "io.dlbench.docker-id"  # the Docker image id a containerd image was imported from
DEV = "/dev"
HELD = "dlbench.invalid/replaced-while-importing:{pid}"  # the replaced image's second name while one process imports


def reference(image: str) -> str:
    """The name containerd keeps `image` under: Docker's short names in full (docker.io/library/NAME:latest)."""
    name, digest = image.split("@", 1) if "@" in image else (image, None)
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if digest is None and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return f"{name}@{digest}" if digest else name


class ContainerdRuntime(Runtime):
    name = "containerd"
    privilege = "a root daemon (containerd); ctr needs its socket"
    binary = "ctr"
    subcommand = ("run", "--rm")
    removes_container = True
    runs_as_image_user = True  # the image's USER (bench, uid 1000)
    install_hint = "Debian's containerd package, which docker.io depends on"

    def ctr_argv(self, *args: str) -> list[str]:
        return [self.executable(), "--namespace", os.environ.get("CONTAINERD_NAMESPACE") or NAMESPACE, *args]

    def ctr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return run_quiet(self.ctr_argv(*args), timeout=timeout)

    # ---- the image ----------------------------------------------------------------
    def import_image(self, image: str) -> str:
        """containerd's copy of the local Docker image, imported once per image id (ImageStore); an image only
        containerd has, as it is."""
        ref, docker_id = reference(image), local_docker_id(image)
        if docker_id is None:
            if self.labels(ref) is not None:
                return ref  # containerd's own image
            raise UsageError(f"image {image!r} not found by containerd, nor in a local Docker engine to import it from")
        # The import names the new copy, the label stamps it; the replaced image goes with its last name.
        copy = EngineCopy(tmp_lock(f"containerd-{safe_name(ref)}"),
                          reads=lambda: (self.labels(ref) or {}).get(ID_LABEL),
                          publishes=lambda stamp: self.ctr("images", "label", ref, f"{ID_LABEL}={stamp}"),
                          discards=self.remove_held)
        ImageStore(copy).materialise(docker_id, lambda: self.load(image, ref))
        return ref

    def load(self, image: str, ref: str) -> None:
        """`docker save IMAGE | ctr images import -`, the replaced image held meanwhile. It keeps a second name
        until the new one is unpacked: else containerd's garbage collector may take the layers both share from
        under the unpack ("parent snapshot ... does not exist", seen here; containerd issues #2382, #3787)."""
        held = HELD.format(pid=os.getpid())
        replacing = self.labels(ref) is not None
        if replacing:
            self.ctr("images", "tag", "--force", ref, held)
        save = subprocess.Popen([shutil.which("docker"), "save", image], stdout=subprocess.PIPE,
                                stdin=subprocess.DEVNULL)
        try:
            loaded = subprocess.run(self.ctr_argv("images", "import", "-"), stdin=save.stdout, capture_output=True,
                                    text=True)
        except BaseException:  # Ctrl-C
            save.kill()
            raise
        finally:
            save.stdout.close()
            if replacing:
                self.ctr("images", "rm", held)  # the replaced image goes with its last name (the collector's work)
        if save.wait() != 0 or loaded.returncode != 0 or self.labels(ref) is None:
            self.ctr("images", "rm", ref)  # nothing half-imported left
            raise UsageError(f"docker save {image} | ctr images import - failed: {last_line(loaded.stderr)}")

    def remove_held(self) -> None:
        """The second names of replaced images whose importer was killed (this host's processes that are gone:
        the store's lock is this host's too)."""
        prefix = HELD.split("{", 1)[0]
        listed = self.ctr("images", "ls", "-q")
        for name in listed.stdout.split() if listed.returncode == 0 else []:
            pid = name.removeprefix(prefix)
            if name.startswith(prefix) and pid.isdigit() and not alive(int(pid)):
                self.ctr("images", "rm", name)

    def labels(self, ref: str) -> dict[str, str] | None:
        """containerd's labels of its image `ref` (None: it has no such image)."""
        listed = self.ctr("images", "ls", f"name=={ref}")
        rows = listed.stdout.splitlines()[1:] if listed.returncode == 0 else []
        if not rows:
            return None
        found = rows[0].split()[-1]  # REF TYPE DIGEST SIZE(2 words) PLATFORMS LABELS; "-" for none
        return dict(pair.split("=", 1) for pair in found.split(",") if "=" in pair)

    # ---- the command line ----------------------------------------------------------
    def slots(self, run: Invocation) -> Command:
        command = super().slots(run)
        command["program_options"] = self.ctr_argv()[1:]  # --namespace NAME
        command["image"] = [reference(run.image), run.name or f"dlbench-{os.getpid()}"]  # ctr run IMAGE ID COMMAND
        return command

    def base_options(self, image: str) -> list[str]:
        # Ranks talk over loopback; the host's /dev/shm for DataLoader workers (ctr's own is 64 MB).
        return ["--net-host", "--mount", "type=bind,src=/dev/shm,dst=/dev/shm,options=rbind:rw"]

    def gpu_options(self) -> list[str]:
        indices = sorted(int(m[1]) for m in map(re.compile(r"nvidia(\d+)").fullmatch, os.listdir(DEV)) if m)
        if not indices:
            raise UsageError(f"--gpus: no {DEV}/nvidiaN on this node (ctr names each GPU by its index)")
        return [arg for index in indices for arg in ("--gpus", str(index))]

    def env_option(self, key: str, value: str | None) -> list[str]:
        return ["--env", f"{key}={os.environ.get(key, '') if value is None else value}"]

    def mount_option(self, mount: Mount) -> list[str]:
        return ["--mount", f"type=bind,src={mount.source},dst={mount.target},options=rbind:{'ro' if mount.readonly else 'rw'}"]

    def workdir_option(self, workdir: str) -> list[str]:
        return ["--cwd", workdir]

    # ---- clean up ---------------------------------------------------------------------
    def clean_up(self, name: str, prefix: bool = False) -> None:
        try:
            listed = self.ctr("containers", "ls", "-q").stdout.split()
            for found in (c for c in listed if c == name or (prefix and c.startswith(name))):
                self.ctr("tasks", "rm", "-f", found)  # kills a task still running
                self.ctr("containers", "rm", found)  # and its snapshot
        except subprocess.TimeoutExpired:  # a daemon that hangs
            pass

    def fault(self) -> str | None:
        try:
            answer = self.ctr("version", timeout=15)
        except subprocess.TimeoutExpired:
            return "containerd does not answer (no answer within 15 s)"
        return None if answer.returncode == 0 else f"containerd does not answer ({last_line(answer.stderr)[:200]})"
