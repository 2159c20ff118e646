"""`benchrun info` (issue 46, item 5) against what this machine really has: every runtime and launcher
row says what PATH says, the frameworks what this Python can import, the data what is on disk; and with
a PATH the test makes itself, a missing runtime gets its install line and a present one its version."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

from benchmarks.core import framework_specs
from benchmarks.data.labelled import FASHION_MNIST_FILES
from benchmarks.settings.options import FASHION_MNIST_DIR
from infra.helpers import ROOT
from runners import launchers, runtimes


def info(env: dict | None = None, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runners", "info", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)


def rows(env: dict | None = None) -> dict[tuple[str, str], dict]:
    done = info(env, "--json")
    assert done.returncode == 0, done.stderr
    found = [json.loads(line) for line in done.stdout.splitlines()]
    return {(row["kind"], row["name"]): row for row in found}


def test_info_says_what_this_machine_has():
    found = rows()
    for name in runtimes.RUNTIMES:
        runtime = runtimes.get(name)
        if runtime.uses_image:  # a Slurm plugin's runtime needs srun and its plugin: available() says both
            assert found["runtime", name]["found"] == runtime.available(), name
            assert not runtime.available() or shutil.which(runtime.binary), name
    for name in launchers.LAUNCHERS:
        launcher = launchers.get(name)
        if launcher.binary is not None:
            assert found["launcher", name]["found"] == launcher.available(), name
    for spec in framework_specs.FRAMEWORKS.values():
        importable = all(importlib.util.find_spec(m) is not None for m in spec.modules)
        assert found["framework", f"{spec.name} (this Python)"]["found"] == importable
    on_disk = all(os.path.isfile(os.path.join(FASHION_MNIST_DIR, f)) for pair in FASHION_MNIST_FILES.values() for f in pair)
    assert found["data", "fashion-mnist"]["found"] == on_disk
    assert any(kind == "gpu" for kind, _ in found) and any(kind == "image" for kind, _ in found)
    assert all(row["found"] or row["install"] for row in found.values() if row["kind"] != "gpu" or not row["found"])
    table = info().stdout
    assert table.splitlines()[0].split() == ["found", "detail,", "or", "what", "to", "run"]
    assert all(f" {row['name']} " in table for row in found.values())


def test_a_missing_runtime_gets_its_install_line_and_a_present_one_its_version(tmp_path):
    """PATH is a folder of the test's own: docker and apptainer are absent from it, and a `sarus` that
    answers --version like the real one is present."""
    (tmp_path / "sarus").write_text("#!/bin/sh\necho 'Sarus version 1.7.0'\n")
    (tmp_path / "sarus").chmod(0o755)
    found = rows({**os.environ, "PATH": str(tmp_path)})
    docker = found["runtime", "docker"]
    assert not docker["found"] and docker["install"].startswith("containers/dockerd.sh --install")
    assert found["runtime", "apptainer"]["install"] == runtimes.get("apptainer").install_hint
    assert found["runtime", "enroot"]["install"].startswith("installed by the site")
    sarus = found["runtime", "sarus"]
    assert sarus["found"] and sarus["detail"].startswith("Sarus version 1.7.0; a setuid-root helper")
    images = [row for (kind, _), row in found.items() if kind == "image"]
    assert images and all(not row["found"] and row["detail"] == "no docker client to ask" for row in images)
    srun = found["launcher", "srun"]
    assert not srun["found"] and "local-slurm.sh" in srun["install"]
