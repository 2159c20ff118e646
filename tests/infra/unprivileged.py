"""An unprivileged user for the tests (`nobody`, as sites run HPC runtimes): its own home outside the
clone, a venv with benchrun's packages made once, and a shell as that user."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .cache import inputs_key, once
from .helpers import ROOT
from .slurm import skip_loudly

UNPRIVILEGED_HOME = Path("/var/tmp/dlbench-unprivileged")  # the user's own cache, outside the clone
UNPRIVILEGED_PACKAGES = ["pydantic>=2.6,<3", "numpy>=1.26", "pyyaml>=6", "rich>=13", "psutil>=5.9"]  # benchrun's


def as_nobody(script: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", "nobody", "--", "env", f"HOME={UNPRIVILEGED_HOME}", "PATH=/usr/bin:/bin",
                           f"PYTHONPATH={ROOT}", "bash", "-c", script], capture_output=True, text=True,
                          timeout=timeout, cwd=UNPRIVILEGED_HOME, stdin=subprocess.DEVNULL)


def unprivileged_user() -> Path:
    """nobody's home and venv (benchrun's packages), made once; skips where nobody cannot read this checkout."""
    if os.geteuid() != 0 or subprocess.run(["id", "nobody"], capture_output=True).returncode != 0:
        skip_loudly("UNPRIVILEGED TESTS SKIPPED: needs root (to act as user nobody) and that user")
    if (os.stat(ROOT).st_mode & 0o005) != 0o005:
        skip_loudly(f"UNPRIVILEGED TESTS SKIPPED: {ROOT} is not readable by other users")
    UNPRIVILEGED_HOME.mkdir(exist_ok=True)
    os.chown(UNPRIVILEGED_HOME, 65534, 65534)
    venv = UNPRIVILEGED_HOME / "venv"

    def make_venv() -> str:
        out = as_nobody(f"rm -rf {venv} && /usr/bin/python3 -m venv {venv} && {venv}/bin/pip install -q "
                        + " ".join(f"'{p}'" for p in UNPRIVILEGED_PACKAGES))
        assert out.returncode == 0, out.stderr[-2000:]
        return str(venv)

    once("unprivileged-venv", inputs_key([], [*UNPRIVILEGED_PACKAGES, sys.version]), make_venv,
         lambda text: Path(text, "bin", "python").exists())
    return venv
