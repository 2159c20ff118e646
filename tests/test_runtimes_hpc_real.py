"""Real runs under Enroot, Pyxis, the CSCS Container Engine and Shifter, wherever they exist.

None of them can be installed on the project's machines (no package; building them from upstream
sources is not something this project does), so here these tests skip, loudly, naming what is
missing; on a site that has them (a DGX/Slurm cluster with Pyxis, an Alps vCluster, a Shifter
system) they run the real thing: `pytest -m slow tests/test_runtimes_hpc_real.py`."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from infra.helpers import benchrun_record
from infra.slurm import skip_loudly
from runners.runtimes import slurm_plugin

pytestmark = pytest.mark.slow

IMAGE = os.environ.get("DLBENCH_TEST_IMAGE", "dlbench-torch:latest")  # Docker image, or a .sqsh for pyxis/cscs-ce
TINY = ["--framework", "torch", "--model", "alexnet", "--image-size", "64", "--batch-size", "2",
        "--num-warmup-batches", "1", "--num-batches", "2", "--num-threads", "1"]


def benchrun_run(*args, timeout=1800):
    result, record = benchrun_record("run", *args, timeout=timeout)
    assert result.returncode == 0 and record, f"exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return record


def docker_image_or_skip(what: str):
    if IMAGE.endswith(".sqsh"):
        return
    if not shutil.which("docker") or subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        skip_loudly(f"{what} REAL RUN NOT RUN: image {IMAGE} not in a local Docker engine (make images, or "
                    f"DLBENCH_TEST_IMAGE=/path/file.sqsh)")


def plugin_or_skip(option: str, what: str):
    srun = shutil.which("srun")
    if srun is None or option not in slurm_plugin.srun_help(srun):
        skip_loudly(f"{what} REAL RUN NOT RUN: no srun with {option} here ({what} is not installable on this "
                    f"machine; it runs where a site provides it)")


def test_enroot_real_run():
    if shutil.which("enroot") is None:
        skip_loudly("ENROOT REAL RUN NOT RUN: 'enroot' is not on PATH (not installable here: no package; "
                    "see docs/runtimes.md)")
    docker_image_or_skip("ENROOT")
    record = benchrun_run("--runtime", "enroot", "--image", IMAGE, "--", *TINY)
    assert record["status"] == "ok" and record["throughput"]["images_per_sec"] > 0
    again = benchrun_run("--runtime", "enroot", "--image", IMAGE, "--", *TINY)  # squashfs and rootfs reused
    assert again["status"] == "ok" and again["run_id"] != record["run_id"]


@pytest.mark.parametrize("workers", [1, 2])
def test_pyxis_real_run(workers):
    plugin_or_skip("--container-image", "PYXIS")
    docker_image_or_skip("PYXIS")
    strategy = ["--strategy", "ddp"] if workers > 1 else []
    record = benchrun_run("--runtime", "pyxis", "--image", IMAGE, "--launcher", "srun", "-n", str(workers),
                          "--", *TINY, *strategy)
    assert record["status"] == "ok" and record["world"]["workers"] == workers


def test_cscs_ce_real_run():
    plugin_or_skip("--environment", "CSCS CONTAINER ENGINE")
    docker_image_or_skip("CSCS CONTAINER ENGINE")
    record = benchrun_run("--runtime", "cscs-ce", "--image", IMAGE, "--", *TINY)
    assert record["status"] == "ok"


def test_shifter_real_run():
    if shutil.which("shifter") is None:
        skip_loudly("SHIFTER REAL RUN NOT RUN: 'shifter' is not on PATH (not installable here; see docs/runtimes.md)")
    if os.geteuid() == 0:
        skip_loudly("SHIFTER REAL RUN NOT RUN: Shifter refuses root; run this test as a regular user")
    image = os.environ.get("DLBENCH_TEST_SHIFTER_IMAGE")
    if not image:
        skip_loudly("SHIFTER REAL RUN NOT RUN: set DLBENCH_TEST_SHIFTER_IMAGE to the site's image "
                    "(docker:REPO:TAG after shifterimg pull, id:ID, or local:/dir)")
    record = benchrun_run("--runtime", "shifter", "--image", image, "--", *TINY)
    assert record["status"] == "ok"
