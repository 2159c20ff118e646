"""Plugins every test module gets (tests/infra/) and the shared ImageFolder fixture.

Helpers (bench, benchrun, run, validate_record, ...) are imported from infra.helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra.helpers import bench

# Two workers share two cores, each running bench processes with a thread per core: an OpenMP thread
# (torch) that spins while it waits for work takes the core the other worker's process needs. Waiting
# threads sleep instead. Side by side, test_models + test_precision + test_flops + test_progress on
# two workers: 178 and 171 s spinning, 154 and 154 s passive. What a test asserts does not change:
# bench's measurements are of the same code either way (users' runs keep their own setting).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The GEMM ceiling probe (bench --ceiling, default cached) costs a few seconds per run where its cache does not
# persist (every container run): the suite's runs leave it off; tests/test_ceiling.py asks for it (docs/testing.md).
os.environ.setdefault("DLBENCH_CEILING", "off")

pytest_plugins = ["infra.slurm", "infra.docker", "infra.images", "infra.records", "infra.phases", "infra.parallel"]


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "imagefolder"
    result = bench("make-dataset", str(root), "--images", "24", "--classes", "3", "--min-size", "64", "--max-size", "128")
    assert result.returncode == 0, result.stderr
    return root


def pytest_configure(config):
    # here, not in pyproject.toml: the images' dependency layers copy pyproject.toml, so editing it
    # rebuilds them all (Horovod compiled twice) for a test marker
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (tests/test_gpu.py); skipped loudly without one; "
                            "`-m gpu` runs them on a GPU machine (perf/gpu.md)")


@pytest.fixture(scope="session")
def fashion_mnist():
    """Debian's Fashion-MNIST files (installed here when missing; skipped loudly where apt cannot)."""
    from benchmarks.data.fashion_mnist import FASHION_MNIST_DIR, FASHION_MNIST_PACKAGE
    from infra.slurm import ensure_packages_or_skip

    ensure_packages_or_skip((FASHION_MNIST_PACKAGE,), "FASHION-MNIST")
    return FASHION_MNIST_DIR
