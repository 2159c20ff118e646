"""A running Docker engine for the container tests, started by the project's own script, and a
private one (`private_dockerd`) for tests that stop or kill a daemon.

Skips (loudly) only where Docker cannot exist: not root, or no apt to install it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERD = ROOT / "containers" / "dockerd.sh"
ENSURE_PACKAGES = ROOT / "scripts" / "ensure-packages.sh"
INSTALL_COMPOSE_V2 = ROOT / "scripts" / "install-compose-v2.sh"
# What `make images` needs beside the engine on a fresh machine: the local base image
# is made with debootstrap; the compose tests run Compose v2 (`docker compose`, from a newer
# Debian suite by install-compose-v2.sh) and check the files with bookworm's v1 too.
HOST_PACKAGES = ("debootstrap", "docker-compose")


@pytest.fixture(scope="session")
def docker():
    from .cache import CACHE

    argv = [str(DOCKERD)]
    if os.geteuid() == 0 and shutil.which("apt-get"):
        argv.append("--install")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "dockerd-start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # test workers start at once: one installs/starts, the other then finds it up
        p = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            pytest.skip(f"DOCKER UNAVAILABLE, container tests NOT run: {p.stderr.strip()}")
        pytest.fail(f"could not start Docker: {p.stderr.strip()}")
    if os.geteuid() == 0 and shutil.which("apt-get"):
        p = subprocess.run([str(ENSURE_PACKAGES), *HOST_PACKAGES], capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, f"could not install {HOST_PACKAGES}: {p.stderr.strip()}"
        p = subprocess.run([str(INSTALL_COMPOSE_V2)], capture_output=True, text=True, timeout=900,
                           stdin=subprocess.DEVNULL)  # it takes its own lock: the other worker waits
        assert p.returncode == 0, f"could not install Compose v2: {p.stderr.strip()}"
    return "docker"


class PrivateDockerd:
    """A dockerd of a test's own, beside the shared one (which others use and must never be stopped):
    started by containers/dockerd.sh --root on a socket under a temp dir, its data and exec roots under
    ~/.cache/dlbench/private-dockerd-NAME, so images loaded once survive between runs. Killing and
    restarting it is the test's business; one test session at a time holds it (a file lock)."""

    def __init__(self, name: str):
        from .cache import CACHE

        self.name = name
        self.root = CACHE / f"private-dockerd-{name}"
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.root / "lock", "w")  # close-on-exec: the daemon does not inherit it
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self.socket_dir = Path(tempfile.mkdtemp(prefix="dlb-dockerd-"))
        self.env = {"DOCKER_HOST": f"unix://{self.socket_dir}/docker.sock"}

    def docker(self, *args: str, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", *args], env={**os.environ, **self.env}, capture_output=True, text=True,
                              timeout=timeout, **kwargs)

    def start(self) -> None:
        p = subprocess.run([str(DOCKERD), "--root", str(self.root)], env={**os.environ, **self.env},
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, f"private dockerd did not start: {p.stderr.strip()}"

    def pid(self) -> int:
        return int((self.root / "dockerd.pid").read_text())

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 60) -> None:
        """Signal the daemon and wait until it is gone (SIGKILL: a crash; SIGTERM: a stop)."""
        from benchmarks.core.processes import alive

        pid = self.pid()
        os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while alive(pid):
            assert time.monotonic() < deadline, f"private dockerd {pid} still alive {timeout:g} s after signal {sig}"
            time.sleep(0.1)

    def load(self, image: str) -> None:
        """`docker save IMAGE` from the shared daemon into this one, once per image id."""
        from .cache import once
        from .images import image_id

        wanted = image_id(image)

        def build() -> str:
            save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
            load = self.docker("load", stdin=save.stdout)
            save.stdout.close()
            assert save.wait() == 0 and load.returncode == 0, f"docker save | load failed: {load.stderr[-2000:]}"
            self.docker("image", "prune", "-f")  # earlier ids of the image, now untagged
            return wanted

        def there(text: str) -> bool:
            return self.docker("image", "inspect", "-f", "{{.Id}}", image).stdout.strip() == text

        once(f"private-dockerd-{self.name}-image", wanted[-16:], build, there)

    def unmount_leftovers(self) -> None:
        """A dockerd killed with SIGKILL leaves its data root's bind mount and its network namespace
        mounted (`rm -rf ~/.cache/dlbench` then fails: busy); once it is gone, they are ours to remove."""
        import psutil

        inside = [part.mountpoint for part in psutil.disk_partitions(all=True)
                  if Path(part.mountpoint).is_relative_to(self.root)]
        for mountpoint in sorted(inside, key=len, reverse=True):  # the deepest first
            subprocess.run(["umount", mountpoint], capture_output=True)

    def close(self) -> None:
        if (self.root / "dockerd.pid").exists():
            from benchmarks.core.processes import alive

            if alive(self.pid()):
                self.kill(signal.SIGTERM)
        self.unmount_leftovers()
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        self._lock.close()


@pytest.fixture(scope="module")
def private_dockerd(docker, dlbench_images):
    """A private dockerd holding the TensorFlow image (the smaller one); stopped at the end of the module."""
    daemon = PrivateDockerd("env-faults")
    try:
        daemon.start()
        daemon.load(dlbench_images["tensorflow"])
        yield daemon
    finally:
        daemon.close()


def derived_image(tag: str, base: str, *instructions: str) -> str:
    """Build `tag` FROM `base` plus `instructions` (a LABEL gives a new id over the same layers; a RUN,
    a new top layer): a rebuilt image in seconds. Returns its id."""
    dockerfile = "\n".join([f"FROM {base}", *instructions]) + "\n"
    built = subprocess.run(["docker", "build", "-q", "-t", tag, "-"], input=dockerfile, capture_output=True,
                           text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    return built.stdout.strip()


def one_file_image(image: str, file: Path) -> str:
    """A Docker image of one file and no labels (no libc either): quick to pull, migrate or prune.
    Returns its id, without "sha256:"."""
    tar = subprocess.Popen(["tar", "-C", str(file.parent), "-c", file.name], stdout=subprocess.PIPE)
    made = subprocess.run(["docker", "import", "-", image], stdin=tar.stdout, capture_output=True, text=True)
    tar.stdout.close()
    assert tar.wait() == 0 and made.returncode == 0, made.stderr
    return made.stdout.strip().removeprefix("sha256:")
