"""Plugins every test module gets (tests/infra/) and the shared ImageFolder fixture.

Helpers (bench, benchrun, run, validate_record, ...) are imported from infra.helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.helpers import bench

pytest_plugins = ["infra.slurm", "infra.docker", "infra.images", "infra.records", "infra.phases", "infra.parallel"]


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "imagefolder"
    result = bench("make-dataset", str(root), "--images", "24", "--classes", "3", "--min-size", "64", "--max-size", "128")
    assert result.returncode == 0, result.stderr
    return root
