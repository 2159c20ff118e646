"""Apptainer for the tests: installed by scripts/install-apptainer.sh (itself cached under
~/.cache/dlbench and keyed on what it downloaded), and the images as SIFs, built by the runtime's own
import once per Docker image id (under the machine's heavy-work lock: a 2-6 GB conversion). Both skip
loudly only where Apptainer cannot be installed (not root, not Debian).

An unprivileged user (`nobody`, as sites run Apptainer; tests/infra/unprivileged.py) gets copies of
the SIFs under its home, and read-write /dev/fuse through an ACL for the length of a test
(`fuse_for`): squashfuse mounts the SIF.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .helpers import ROOT, python_env
from .podman_hpc import heavy_work
from .slurm import skip_loudly
from .unprivileged import UNPRIVILEGED_HOME

INSTALL = ROOT / "scripts" / "install-apptainer.sh"
FUSE = "/dev/fuse"


def install() -> str:
    """PREFIX/bin, holding apptainer and singularity."""
    if os.geteuid() != 0 or not Path("/usr/bin/dpkg-query").exists():
        skip_loudly("APPTAINER TESTS SKIPPED: installing it needs root on a Debian system (apt)")
    done = subprocess.run([str(INSTALL)], capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"install-apptainer.sh failed ({done.returncode}):\n{done.stderr[-3000:]}"
    line = done.stdout.strip()
    assert line.startswith('export PATH="') and line.endswith('/bin:$PATH"'), line
    return line.removeprefix('export PATH="').removesuffix(':$PATH"')


def env(bin_dir: str, **extra: str) -> dict[str, str]:
    """This environment with Apptainer on PATH (python_env: this checkout's packages first)."""
    return python_env({"PATH": f"{bin_dir}:{os.environ['PATH']}", **extra})


def sif(image: str, bin_dir: str) -> str:
    """`image` as a SIF, built by the runtime once per Docker image id (the build takes the heavy-work lock)."""
    code = f"from runners.runtimes import get\nprint(get('apptainer').prepare({image!r}))"
    with heavy_work():
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env(bin_dir), capture_output=True,
                              text=True, timeout=3600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"SIF of {image}:\n{done.stderr[-3000:]}"
    return done.stdout.strip()


def copy_for_nobody(path: str) -> Path:
    """A copy of a root-owned SIF that nobody can read (the only SIF kept there: copies of others go)."""
    target = UNPRIVILEGED_HOME / Path(path).name
    for old in UNPRIVILEGED_HOME.glob("*.sif*"):
        if old != target:
            old.unlink()
    if not target.is_file() or target.stat().st_size != Path(path).stat().st_size:
        shutil.copyfile(path, f"{target}.partial")
        os.replace(f"{target}.partial", target)
    target.chmod(0o644)
    return target


@contextlib.contextmanager
def fuse_for(user: str):
    """Read-write /dev/fuse for `user` (an ACL), as a site grants it; removed afterwards."""
    if shutil.which("setfacl") is None:
        done = subprocess.run([str(ROOT / "scripts" / "ensure-packages.sh"), "acl"], capture_output=True, text=True,
                              timeout=600, env={**os.environ, "NEEDRESTART_SUSPEND": "1"})
        assert done.returncode == 0, done.stderr
    had_acl = "user:" in subprocess.run(["getfacl", "-cp", FUSE], capture_output=True, text=True).stdout.replace(
        "user::", "")
    subprocess.run(["setfacl", "-m", f"u:{user}:rw", FUSE], check=True)
    try:
        yield
    finally:
        subprocess.run(["setfacl", "-x", f"u:{user}", FUSE], check=True)
        if not had_acl:
            subprocess.run(["setfacl", "-b", FUSE], check=True)
