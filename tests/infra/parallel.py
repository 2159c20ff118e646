"""`make test` runs on two pytest-xdist workers (`-n 2 --dist loadgroup`): what may run side by side.

Most of the suite waits: on containers starting, clusters, launchers, timeouts. Two workers fill those
waits with the other worker's tests. What must not run side by side is kept together here:

- A module is one group (`xdist_group`): its module fixtures (a private dockerd, a cluster, an imported
  image) are set up once, on one worker, and its tests keep their order.
- A module may name a shared group in `XDIST_GROUP`: modules whose checks look at state that other
  modules' runs also create (the Docker engine's `dlbench-*` containers) share one worker.
- Multi-rank runs pass `infra.helpers.ports()`, bench's ports offset per worker.

Groups are handed to the workers in the order of `HEAVY` (`--no-loadscope-reorder` keeps it), longest
first, so that no long group starts last and leaves one worker idle at the end. test_horovod leads: on a
cold machine its fixture builds the images and then Horovod (~10 min) while the other worker runs
modules that need no image.
"""

from __future__ import annotations

import os

import pytest

# Modules in the order their groups should start (the longest first; the rest follow in file order).
HEAVY = ("test_horovod", "test_models", "test_runtimes_udocker", "test_runtimes_real", "test_distributed",
         "test_env_faults", "test_failures", "test_trace", "test_compile")


def module_of(item: pytest.Item) -> str:
    return getattr(getattr(item, "module", None), "__name__", item.nodeid.split("::")[0])


def group_of(item: pytest.Item) -> str:
    return getattr(getattr(item, "module", None), "XDIST_GROUP", None) or module_of(item)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the marks into scheduling scopes
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group_of(item)))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a plain `pytest` keeps the file order
        rank = {name: i for i, name in enumerate(HEAVY)}
        # sorted() is stable: within a group and among the other modules, collection order stays.
        items[:] = sorted(items, key=lambda item: rank.get(module_of(item), len(HEAVY)))
