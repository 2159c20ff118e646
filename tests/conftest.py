"""Plugins every test module gets (tests/infra/) and the shared ImageFolder fixture.

Helpers (bench, benchrun, run, validate_record, ...) are imported from infra.helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra.helpers import bench

# Two workers share two cores: one compute thread per bench process (torch reads OMP_NUM_THREADS,
# TensorFlow TF_NUM_INTRAOP_THREADS) rather than a spinning pool per core in each; measured on
# test_models + test_trace: 13-18% less time. TensorFlow's inter-op pool keeps its default: its
# collectives and parameter-server transfers block inter-op threads, and with one the TF pairs hung.
for _name in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS"):
    os.environ.setdefault(_name, "1")

pytest_plugins = ["infra.slurm", "infra.docker", "infra.images", "infra.records", "infra.phases", "infra.parallel"]


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "imagefolder"
    result = bench("make-dataset", str(root), "--images", "24", "--classes", "3", "--min-size", "64", "--max-size", "128")
    assert result.returncode == 0, result.stderr
    return root
