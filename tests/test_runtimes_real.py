"""Real runs of the dlbench images under Docker, Podman and Charliecloud, and `srun ... docker run ...`
on one and two emulated Slurm nodes. Each test starts what it needs; nothing is left behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.helpers import ROOT, SCHEMA, bench, benchrun_record, last_json_line, python_env, validate_record
from infra.slurm import ensure_packages_or_skip, skip_loudly

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("dlbench_images")]  # built once per run (tests/infra/images.py)

TF_IMAGE, TORCH_IMAGE = "dlbench-tensorflow:latest", "dlbench-torch:latest"
TINY_TF = ["--framework", "tensorflow", "--model", "resnet50", "--image-size", "64", "--batch-size", "2",
           "--num-warmup-batches", "1", "--num-batches", "2", "--num-threads", "2"]
DDP = ["--framework", "torch", "--strategy", "ddp", "--model", "alexnet", "--image-size", "64", "--batch-size", "2",
       "--num-warmup-batches", "1", "--num-batches", "2", "--num-threads", "1"]


def docker_up(*images):
    if subprocess.run([str(ROOT / "containers" / "dockerd.sh")], capture_output=True).returncode != 0:
        skip_loudly("DOCKER RUNTIME TESTS SKIPPED: no Docker daemon could be started")
    for image in images:
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
            skip_loudly(f"RUNTIME TESTS SKIPPED: image {image} not built (make images)")


def benchrun_run(*args, env: dict | None = None, timeout: float = 400):
    return benchrun_record("run", *args, env=env, timeout=timeout)


def containers(runtime="docker"):
    out = subprocess.run([runtime, "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    return sorted(n for n in out.split() if n.startswith("dlbench-"))


def validate_in_image(record):
    """Full schema check when the image was built from this schema version; images built from an
    older commit (schema 1.0: no `world`) are checked on the fields benchrun relies on."""
    if record.get("schema_version") == SCHEMA["properties"]["schema_version"]["const"]:
        return validate_record(record)
    for key in ("run_id", "status", "throughput", "provenance", "config"):
        assert key in record, key
    return record


def check_ok(result, record, runtime):
    assert result.returncode == 0, result.stderr[-3000:]
    validate_in_image(record)
    assert record["status"] == "ok", record.get("error")
    assert record["provenance"]["container_runtime"] == runtime
    if record.get("schema_version") == SCHEMA["properties"]["schema_version"]["const"]:
        assert record["provenance"]["requested_runtime"] == runtime  # DLBENCH_RUNTIME reached the container
    assert record["provenance"]["image"] == "dlbench-tensorflow:0.1.0" or record["provenance"]["image"].startswith("dlbench-")
    return record


@pytest.fixture()
def public_dataset():
    """An ImageFolder the image's user (uid 1000) can read: pytest's tmp dirs are 0700."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="dlbench-rt-data-", dir="/tmp"))
    try:
        root.chmod(0o755)
        made = bench("make-dataset", root / "ds", "--images", "12", "--classes", "3", "--min-size", "64",
                     "--max-size", "96", timeout=120)
        assert made.returncode == 0, made.stderr
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield root / "ds"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_docker_real_with_read_only_data(tmp_path, public_dataset):
    docker_up(TF_IMAGE)
    before = containers()
    result, record = benchrun_run("--runtime", "docker", "--results", str(tmp_path), "--data-dir", str(public_dataset),
                                  "--", *TINY_TF)
    check_ok(result, record, "docker")
    assert record["provenance"]["image"] == "dlbench-tensorflow:0.1.0"
    assert record["config"]["data_dir"] == "/data" and record["config"]["data"] == "real"
    assert json.loads((tmp_path / "records.jsonl").read_text())["run_id"] == record["run_id"]
    assert containers() == before


def timeout_and_sigint_leave_no_container(runtime, containers, env=None, start_s=60):
    """A run stopped by --timeout, then one stopped by Ctrl-C: bench records timeout / interrupted,
    benchrun exits 4 / 130, and `containers()` (this runtime's dlbench containers) is empty after each."""
    long_run = [*TINY_TF[:-4], "--num-batches", "100000"]
    t0 = time.monotonic()
    result, record = benchrun_run("--runtime", runtime, "--timeout", "25", "--", *long_run, env=env)
    assert record is not None and record["status"] == "timeout" and result.returncode == 4, result.stderr[-2000:]
    assert time.monotonic() - t0 < 120 + start_s and not containers()

    proc = subprocess.Popen([sys.executable, "-m", "runners", "run", "--runtime", runtime, "--", *long_run],
                            cwd=ROOT, env=python_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + start_s
    while not containers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert containers(), "the container never started"
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert last_json_line(out)["status"] == "interrupted"
    assert not containers(), "a container was left after SIGINT"


def test_docker_timeout_and_sigint_leave_no_container(tmp_path):
    docker_up(TF_IMAGE)
    timeout_and_sigint_leave_no_container("docker", containers)


def test_podman_real(tmp_path):
    docker_up(TF_IMAGE)
    ensure_packages_or_skip(("podman", "runc"), "PODMAN")
    loaded_here = subprocess.run(["podman", "image", "exists", TF_IMAGE]).returncode != 0
    try:
        result, record = benchrun_run("--runtime", "podman", "--", *TINY_TF)
        check_ok(result, record, "podman")
        assert not containers("podman")
    finally:
        if loaded_here:  # the test loaded it (docker save | podman load): give the disk back
            subprocess.run(["podman", "rmi", "-f", TF_IMAGE], capture_output=True)


def test_charliecloud_real(tmp_path):
    docker_up(TF_IMAGE)
    ensure_packages_or_skip(("charliecloud",), "CHARLIECLOUD")
    from runners.runtimes.charliecloud import DEFAULT_STORE

    cached = (Path(os.environ.get("DLBENCH_CH_DIR") or DEFAULT_STORE) / "dlbench-tensorflow+latest" / "ch" / "dlbench-image-id")
    store = None if cached.is_file() else tmp_path / "ch"  # else convert here (~3 min) and remove it after
    extra = {} if store is None else {"DLBENCH_CH_DIR": str(store)}
    try:
        result, record = benchrun_run("--runtime", "charliecloud", "--", *TINY_TF, env=extra, timeout=600)
        check_ok(result, record, "charliecloud")
        assert record["provenance"]["image"] == "dlbench-tensorflow:0.1.0"
    finally:
        if store is not None:
            shutil.rmtree(store, ignore_errors=True)


def srun_docker(cluster, *extra):
    docker_up(TORCH_IMAGE)
    result, record = benchrun_run("--runtime", "docker", "--launcher", "srun", "-n", "2", *extra, "--", *DDP,
                                  env={**cluster["env"], "DLBENCH_COORDINATOR": "127.0.0.1"})
    assert result.returncode == 0, result.stderr[-4000:]
    validate_in_image(record)
    assert record["status"] == "ok" and len(record["ranks"]) == 2 and record["replicas"]["in_sync"]
    assert record["world"]["launcher"] == "srun"
    assert record["provenance"]["container_runtime"] == "docker" and record["provenance"]["image"].startswith("dlbench-torch")
    assert not containers()
    return record


def test_srun_docker_one_node(slurm_single):
    record = srun_docker(slurm_single)
    assert record["world"]["nodes"] == 1


def test_srun_docker_two_emulated_nodes(slurm_two_nodes):
    record = srun_docker(slurm_two_nodes, "--launcher-arg=--nodes=2")
    assert record["world"]["nodes"] == 2 and {r["host"] for r in record["ranks"]} == {"node1", "node2"}
