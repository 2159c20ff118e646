"""podman-hpc for the tests, installed and fed once per machine (tests/infra/cache.py).

`install()` runs scripts/install-podman-hpc.sh (itself cached under ~/.cache/dlbench and keyed on
its content; the stamp here only saves the call) and returns the directory to put first on PATH;
`imported(image, path)` migrates a local Docker image once per image id (the runtime's own import,
under the machine's heavy-work lock: a pull + migrate of a 2-3 GB image). Both skip loudly only
where podman-hpc cannot be installed (not root, not Debian).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from pathlib import Path

from .cache import inputs_key, once
from .helpers import ROOT, python_env
from .slurm import skip_loudly

INSTALL = ROOT / "scripts" / "install-podman-hpc.sh"
HEAVY_LOCK = os.environ.get("DLBENCH_HEAVY_LOCK", "/tmp/dlbench-heavy.lock")


@contextlib.contextmanager
def heavy_work():
    """The machine's heavy-work lock (one multi-GB conversion at a time), held by this process."""
    if not HEAVY_LOCK:
        yield
        return
    with open(HEAVY_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def install() -> str:
    """PREFIX/bin, holding the configured podman-hpc."""
    if os.geteuid() != 0 or not Path("/usr/bin/dpkg-query").exists():
        skip_loudly("PODMAN-HPC TESTS SKIPPED: installing it needs root on a Debian system (apt)")

    def build() -> str:
        done = subprocess.run([str(INSTALL)], capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"install-podman-hpc.sh failed ({done.returncode}):\n{done.stderr[-3000:]}"
        line = done.stdout.strip()
        assert line.startswith('export PATH="') and line.endswith('/bin:$PATH"'), line
        return line.removeprefix('export PATH="').removesuffix(':$PATH"')

    key = inputs_key(["scripts/install-podman-hpc.sh", "scripts/ensure-packages.sh"])
    return once("podman-hpc-install", key, build, lambda text: os.access(Path(text) / "podman-hpc", os.X_OK))


def env(bin_dir: str, **extra: str) -> dict[str, str]:
    """This environment with podman-hpc on PATH (python_env: this checkout's packages first)."""
    return python_env({"PATH": f"{bin_dir}:{os.environ['PATH']}", **extra})


def _runtime(bin_dir: str, code: str) -> str:
    """Run `code` (with `rt`, the podman-hpc Runtime) in a fresh interpreter with podman-hpc on PATH."""
    argv = [sys.executable, "-c", f"from runners.runtimes import get\nrt = get('podman-hpc')\n{code}"]
    done = subprocess.run(argv, cwd=ROOT, env=env(bin_dir), capture_output=True, text=True, timeout=1800,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{code}:\n{done.stderr[-3000:]}"
    return done.stdout.strip()


def imported(image: str, bin_dir: str) -> str:
    """`image` migrated for podman-hpc, once per Docker image id (the import takes the heavy-work lock)."""
    image_id = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], capture_output=True,
                              text=True).stdout.strip().removeprefix("sha256:")
    assert image_id, f"{image} is not in the local Docker engine"

    def valid(text: str) -> bool:
        return _runtime(bin_dir, f"print(rt.squashed_id({image!r}))") == text

    def build() -> str:
        if not valid(image_id):  # imported already (by an earlier run or by hand): no lock to wait for
            with heavy_work():
                _runtime(bin_dir, f"print(rt.prepare({image!r}))")
        return image_id

    once("podman-hpc-image", inputs_key([], [image, bin_dir, image_id]), build, valid)
    return image
