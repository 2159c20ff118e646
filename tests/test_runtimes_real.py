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
import uuid
from pathlib import Path

import pytest

from benchmarks.core.errors import EXIT_INTERRUPTED
from infra.cache import CACHE
from infra.docker import derived_image
from infra.helpers import ROOT, SCHEMA, Started, bench, benchrun_record, last_json_line, python_env, validate_record
from infra.images import BASE_IMAGE
from infra.slurm import ensure_packages_or_skip, skip_loudly
from runners import runtimes

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("dlbench_images")]  # built once per run (tests/infra/images.py)

TF_IMAGE, TORCH_IMAGE = "dlbench-tensorflow:latest", "dlbench-torch:latest"
CH_STORE = CACHE / "charliecloud"  # Charliecloud image directories, kept between runs (the runtime's own stamps)
# The runtimes are under test, not the model: Keras AlexNet builds and traces in half the time of ResNet-50.
TINY_TF = ["--framework", "tensorflow", "--model", "alexnet", "--image-size", "64", "--batch-size", "2",
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


MARK = uuid.uuid4().hex  # this module's runs carry it into their containers (benchrun passes DLBENCH_* on)


@pytest.fixture(autouse=True)
def marked_runs(monkeypatch):
    monkeypatch.setenv("DLBENCH_TEST_MARK", MARK)


def containers(runtime="docker"):
    """This module's containers: benchrun names them dlbench-*, and this module's carry MARK. The other test
    worker runs benchrun's containers too (test_accuracy, test_reframe): not this module's to count."""
    out = subprocess.run([runtime, "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    ours = []
    for name in sorted(n for n in out.split() if n.startswith("dlbench-")):
        env = subprocess.run([runtime, "inspect", "--format", "{{json .Config.Env}}", name], capture_output=True,
                             text=True)
        if env.returncode == 0 and f"DLBENCH_TEST_MARK={MARK}" in (json.loads(env.stdout or "null") or []):
            ours.append(name)  # (one gone between the listing and its inspection is not left)
    return ours


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


def timeout_and_sigint_leave_no_container(runtime, containers, env=None, start_s=60, stop=signal.SIGINT):
    """A run stopped by --timeout, then one stopped by `stop` (Ctrl-C; or SIGTERM: scancel, a job's time
    limit) once bench is up: bench records timeout / interrupted, benchrun exits 4 / 130, and
    `containers()` (this runtime's dlbench containers) is empty after each."""
    long_run = [*TINY_TF[:-4], "--num-batches", "100000"]
    t0 = time.monotonic()
    result, record = benchrun_run("--runtime", runtime, "--timeout", "15", "--", *long_run, env=env)
    assert record is not None and record["status"] == "timeout" and result.returncode == 4, result.stderr[-2000:]
    assert time.monotonic() - t0 < 110 + start_s and not containers()

    started = Started([sys.executable, "-m", "runners", "run", "--runtime", runtime, "--", *long_run], env=python_env(env))
    started.wait_for("bench: building", timeout=start_s + 60)
    assert containers(), "bench is up but no container is listed"
    started.proc.send_signal(stop)
    out, err = started.communicate(timeout=120)
    assert started.proc.returncode == 130, err[-2000:]
    assert last_json_line(out)["status"] == "interrupted"
    assert not containers(), f"a container was left after {stop.name}"


def test_docker_timeout_and_sigterm_leave_no_container(tmp_path):
    """SIGTERM here (udocker's and podman-hpc's tests send SIGINT): benchrun stops the run as for Ctrl-C."""
    docker_up(TF_IMAGE)
    timeout_and_sigint_leave_no_container("docker", containers, stop=signal.SIGTERM)


def test_podman_real(tmp_path):
    """Podman's copy of the image stays between runs: the runtime loads it again only when the Docker
    image's id changed (a rebuilt image is never run from a stale copy)."""
    docker_up(TF_IMAGE)
    ensure_packages_or_skip(("podman", "runc"), "PODMAN")
    result, record = benchrun_run("--runtime", "podman", "--", *TINY_TF)
    check_ok(result, record, "podman")
    assert not containers("podman")
    podman_id = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", TF_IMAGE], capture_output=True,
                               text=True).stdout.strip()
    assert f"sha256:{podman_id}" == subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", TF_IMAGE],
                                                   capture_output=True, text=True).stdout.strip()


def test_podman_reload_removes_the_copy_it_replaced():
    """A rebuilt image is loaded again and Podman's copy of the earlier build goes (a few GB a rebuild
    piled up), but not while another name still has it."""
    docker_up(BASE_IMAGE)
    ensure_packages_or_skip(("podman", "runc"), "PODMAN")
    name, keep = f"dlbench-reload-test:{os.getpid()}", f"dlbench-reload-keep:{os.getpid()}"
    rt = runtimes.get("podman")
    ids = []
    try:
        subprocess.run(["docker", "tag", BASE_IMAGE, name], check=True)
        rt.import_image(name)
        ids.append(rt.image_id(name))
        subprocess.run(["podman", "tag", ids[0], keep], check=True)  # another name: this copy stays
        for n in (1, 2):
            built = derived_image(name, BASE_IMAGE, f"LABEL io.dlbench.test-rebuild={n}")
            rt.import_image(name)
            ids.append(rt.image_id(name))
            assert f"sha256:{ids[-1]}" == built
        assert rt.image_id(keep) == ids[0]
        assert rt.image_id(ids[1]) is None and rt.image_id(name) == ids[2]  # the unnamed copy went
    finally:
        subprocess.run(["podman", "rmi", name, keep], capture_output=True)
        subprocess.run(["docker", "rmi", name, *ids[1:]], capture_output=True)


def test_charliecloud_real(tmp_path):
    """The converted image lives outside the clone (converted once per Docker image id, ~1.5 min)."""
    docker_up(TF_IMAGE)
    ensure_packages_or_skip(("charliecloud",), "CHARLIECLOUD")
    result, record = benchrun_run("--runtime", "charliecloud", "--", *TINY_TF, env={"DLBENCH_CH_DIR": str(CH_STORE)},
                                  timeout=600)
    check_ok(result, record, "charliecloud")
    assert record["provenance"]["image"] == "dlbench-tensorflow:0.1.0"
    stamp = CH_STORE / "dlbench-tensorflow+latest" / "ch" / "dlbench-image-id"
    assert stamp.read_text().strip() == subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", TF_IMAGE],
                                                       capture_output=True, text=True).stdout.strip()


def srun_docker(cluster, *extra):
    """The ranks' threads from the host's OMP_NUM_THREADS (forwarded into each rank's container), not --num-threads."""
    docker_up(TORCH_IMAGE)
    without_threads = DDP[:DDP.index("--num-threads")]
    result, record = benchrun_run("--runtime", "docker", "--launcher", "srun", "-n", "2", *extra, "--", *without_threads,
                                  env={**cluster["env"], "DLBENCH_COORDINATOR": "127.0.0.1", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-4000:]
    validate_in_image(record)
    assert record["config"]["num_threads"] is None and record["provenance"]["framework"]["intra_op_threads"] == 1
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


def test_a_stopped_two_container_run_keeps_both_ranks_steps():
    """Two DDP ranks, each in a Docker container of its own (its own /tmp: only the rendezvous carries rank 1's
    steps to process 0), benchrun stopped by SIGTERM in the timed loop: process 0's record totals both ranks' steps,
    exit 130, and no container is left."""
    docker_up(TORCH_IMAGE)
    long = [*DDP[:DDP.index("--num-batches")], "--num-batches", "100000", "--num-threads", "1", "--display-every", "1"]
    started = Started([sys.executable, "-m", "runners", "run", "--runtime", "docker", "--launcher", "local", "-n", "2",
                       "--", *long], env=python_env())
    started.wait_for("step 3/100000 (repeat 1)", 300)
    started.proc.send_signal(signal.SIGTERM)
    out, err = started.communicate(timeout=120)
    assert started.proc.returncode == EXIT_INTERRUPTED and "Traceback" not in err, err[-3000:]
    record = validate_in_image(last_json_line(out))
    assert record["status"] == "interrupted" and record["error"]["signal"] == "SIGTERM", record["error"]
    assert "every rank completed" in record["error"]["message"], record["error"]["message"]
    assert [row["rank"] for row in record["ranks"]] == [0, 1] and record["throughput"]["total_images"] > 0
    assert not containers()


def test_planted_path_difference_is_fingerprinted_resolved_and_flagged(tmp_path):
    """The overhead job's *why*, planted: the same 2-rank DDP run (torch gloo, one container per rank) on the
    host and in Docker with half a CPU per container (`docker:--cpus=0.5`) and, as Docker always does, each
    rank in a PID namespace of its own. Every rank's fingerprint shows both (the quota, no shared PID
    namespace, no single-copy CMA between the ranks), preflight labels the Docker runs (a thread on half a
    CPU), the comparison resolves Docker as slower (or says it cannot, with N) and the verdict names the quota
    as the first candidate cause, the PID namespace beside it."""
    docker_up(TORCH_IMAGE)
    out = tmp_path / "cmp"
    done = subprocess.run(
        [sys.executable, "-m", "runners", "compare-runtimes", "--runtimes", "local,docker", "--rounds", "3", "--seed", "1",
         "--container-option", "docker:--cpus=0.5", "--launcher", "local", "-n", "2", "--out", str(out), "--", *DDP],
        env=python_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    by_runtime = {name: [r for r in records if r["provenance"]["requested_runtime"] == name] for name in ("local", "docker")}
    assert all(len(rs) == 3 and all(r["status"] == "ok" for r in rs) for rs in by_runtime.values()), records
    for record in by_runtime["local"]:
        path = validate_in_image(record)["path"]
        assert len(path["ranks"]) == 2 and path["shared_pid_namespace"] is True
        assert all(rank["limits"]["cpu_quota"] is None and rank["limits"]["cma"] is True for rank in path["ranks"])
        assert all(rank["collective"]["library"] == "gloo" for rank in path["ranks"])
        assert record["preflight"]["ok"] is True
    for record in by_runtime["docker"]:
        path = validate_in_image(record)["path"]
        assert len(path["ranks"]) == 2 and path["shared_pid_namespace"] is False
        assert all(rank["limits"]["cpu_quota"] == 0.5 and rank["limits"]["cma"] is False for rank in path["ranks"])
        assert record["preflight"]["ok"] is False
        assert any(check["name"] == "threads" and not check["ok"] for check in record["preflight"]["checks"])
    assert sorted(r["comparison"]["position"] for r in records if r["comparison"]["round"] == 1) == [1, 2]
    table = (out / "compare.md").read_text()
    [docker_row] = [line for line in table.splitlines() if line.startswith("| docker | local |")
                    and " | to " not in line]  # the throughput verdict, not the launch rows (| to bench up |, ...)
    assert not [line for line in table.splitlines() if line.startswith("| local | docker |")]  # once, not twice
    assert "slower by" in docker_row or "more rounds" in docker_row, table
    assert "CPU quota" in docker_row and "PID namespace" in docker_row, docker_row
    if "slower by" in docker_row:
        assert "likely cause: docker: CPU quota 0.5 CPUs; local: none" in docker_row, docker_row
    assert not containers()


def test_compare_runtimes_interrupted_mid_round_keeps_its_runs_and_the_same_out_adds_rounds(tmp_path):
    """Ctrl-C while the second runtime of round 1 runs: the first run's record and row are kept, the
    interrupted run is recorded as such, the summary is written (exit 130); the same command again adds
    round 2 in that round's own order, and the table counts every finished run."""
    from runners.commands.compare_runtimes import Comparison

    docker_up(TF_IMAGE)
    out = tmp_path / "cmp"
    argv = [sys.executable, "-m", "runners", "compare-runtimes", "--runtimes", "local,docker", "--seed", "11",
            "--out", str(out)]
    started = Started([*argv, "--rounds", "2", "--", *TINY_TF], env=python_env())
    deadline = time.monotonic() + 300
    while sum("bench: building" in line for line in list(started.err)) < 2:  # the round's second run is up
        assert started.proc.poll() is None and time.monotonic() < deadline, "".join(started.err)[-3000:]
        time.sleep(0.05)
    started.proc.send_signal(signal.SIGINT)
    stdout, stderr = started.communicate(timeout=180)
    assert started.proc.returncode == 130, stderr[-3000:]
    assert "interrupted: the finished runs are kept" in stdout
    order = Comparison("-", 11, ("local", "docker"), {}).order(1)
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [(r["round"], r["position"], r["runtime"]) for r in runs] == [(1, 1, order[0]), (1, 2, order[1])]
    assert runs[0]["status"] == "ok" and runs[1]["status"] in ("interrupted", "no record (exit 130)")
    assert (out / "compare.md").exists() and not containers()

    again = subprocess.run([*argv, "--rounds", "1", "--", *TINY_TF], env=python_env(), capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [(r["round"], r["position"], r["runtime"]) for r in runs[2:]] == \
        [(2, p, name) for p, name in enumerate(Comparison("-", 11, ("local", "docker"), {}).order(2), 1)]
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [r["comparison"]["round"] for r in records if r["status"] == "ok"] == [1, 2, 2]
