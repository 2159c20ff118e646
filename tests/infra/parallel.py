"""`make test` runs on two pytest-xdist workers (`-n 2 --dist loadscope`): what may run side by side.

Most of the suite waits: on containers starting, clusters, launchers, timeouts. Two workers fill those
waits with the other worker's tests. What must not run side by side is kept together here:

- A module is one unit of work: its module fixtures (a private dockerd, a cluster, an imported image)
  are set up once, on one worker, and its tests keep their order.
- Modules in one of `SHARED`'s groups run on one worker, one after the other: their checks look at
  state that the others' runs also create (the engines' `dlbench-*` containers, podman-hpc's mounts).
- Multi-rank runs side by side need no ports of their own: each run's token places its ports.

The controller makes these units itself (`pytest_xdist_make_scheduler`): xdist's own `xdist_group`
marks do not reach its scheduler under pytest 9, whose node ids are no longer the strings xdist
appends the group to, so every test became its own unit and two workers ran one module's tests at once.

Units are handed to the workers in the order of `HEAVY` (`--no-loadscope-reorder` keeps it), longest
first, so that no long unit starts last and leaves one worker idle at the end. test_horovod leads: on a
cold machine its fixture builds the images and then Horovod (~17 min). When the images are still to be
built (the controller looks before the workers start), the other heavy modules that need no image come
next, then those that do: the other worker runs tests beside the builds' single-core steps instead of
waiting for the images.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import PurePosixPath

import pytest

from .images import IMAGES

SHARED = {
    "container-engines": ("test_runtimes_real", "test_containers", "test_runtimes_podman_hpc"),
    # test_reframe runs Apptainer (a SIF of Singularity.def) while test_runtimes_apptainer asserts that no
    # Apptainer process or session mount of ours is left: side by side, one's run is the other's leftover
    "apptainer": ("test_runtimes_apptainer", "test_reframe"),
}
# Modules in the order their units should start: test_horovod (the image builds, when cold), then
# test_runtimes_apptainer (its SIF builds, ~15 min of them after an image change, on the other worker),
# then the longest first by a warm run's summary (the container-engines group ~230 s, models ~210,
# trace ~180, ...; the planted stragglers ~600 s, 2026-12-05); the rest follow in file order.
HEAVY = ("test_horovod", "test_runtimes_apptainer", "test_runtimes_real", "test_straggler", "test_models", "test_trace",
         "test_runtimes_udocker",
         "test_distributed", "test_launchers_real", "test_failures", "test_env_faults", "test_compile",
         "test_reframe", "test_mlflow", "test_gpu_validate")
_GROUP_OF = {module: group for group, modules in SHARED.items() for module in modules}
IMAGE_FIXTURES = {"dlbench_images", "horovod_images"}
COLD = "DLBENCH_TEST_IMAGES_COLD"  # the controller's finding, inherited by the workers: one order for all


def module_of(nodeid: str) -> str:
    return PurePosixPath(nodeid.split("::")[0]).stem


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its module, or the SHARED group of its module."""
    module = module_of(nodeid)
    return _GROUP_OF.get(module, module)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") not in ("loadscope", "loadgroup"):
        return None  # another distribution asked for on the command line: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return ByUnit(config, log)


def images_missing() -> bool:
    """The torch image is not in the local Docker engine (or no engine answers): this run builds the images."""
    try:
        found = subprocess.run(["docker", "image", "inspect", IMAGES["torch"]], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return True
    return found.returncode != 0


def pytest_configure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER") and config.getoption("dist", "no") != "no":
        os.environ[COLD] = "1" if images_missing() else "0"


def order(module: str, needs_image: bool, cold: bool) -> tuple[int, int]:
    """HEAVY's rank; when cold, the heavy modules that need no image before the others (HEAVY[0] first)."""
    rank = HEAVY.index(module) if module in HEAVY else len(HEAVY)
    if not cold:
        return (0, rank)
    return (0 if rank == 0 else 3 if rank == len(HEAVY) else 1 + needs_image, rank)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a plain `pytest` keeps the file order
        needs_image = {module_of(item.nodeid) for item in items if IMAGE_FIXTURES & set(item.fixturenames)}
        cold = os.environ.get(COLD) == "1"
        # sorted() is stable: within a module and among the other modules, collection order stays.
        items[:] = sorted(items, key=lambda item: order(module_of(item.nodeid), module_of(item.nodeid) in needs_image,
                                                        cold))
