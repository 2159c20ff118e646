"""Plugins every test module gets (tests/infra/) and the shared ImageFolder fixture.

Helpers (bench, benchrun, run, validate_record, ...) are imported from infra.helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra.helpers import bench

# Two workers share two cores: one OpenMP thread per torch process rather than a spinning pool per
# core in each (test_models: 18% less time). TensorFlow keeps its own pools: with one inter-op
# thread its collectives and parameter-server transfers hung, and with one intra-op thread a traced
# all-reduce pair died once in free() (a cold run), so the tested TensorFlow setup stays the default.
os.environ.setdefault("OMP_NUM_THREADS", "1")

pytest_plugins = ["infra.slurm", "infra.docker", "infra.images", "infra.records", "infra.phases", "infra.parallel"]


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "imagefolder"
    result = bench("make-dataset", str(root), "--images", "24", "--classes", "3", "--min-size", "64", "--max-size", "128")
    assert result.returncode == 0, result.stderr
    return root
