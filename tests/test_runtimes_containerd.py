"""containerd through its own client `ctr`, for real: a private containerd daemon started here (its own
socket, root and state; Docker's is not touched), the TF image imported once per Docker image id, runs
with read-only data, the rank's environment and working directory, nothing left after a run, a timeout,
Ctrl-C or SIGTERM; bad input one line. The exact command line is checked without containerd."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from test_runtimes_real import (  # noqa: F401 (a fixture)
    TF_IMAGE,
    TINY_TF,
    check_ok,
    docker_up,
    public_dataset,
    timeout_and_sigint_leave_no_container,
)

from benchmarks.core.errors import UsageError
from infra.cache import CACHE
from infra.helpers import benchrun, benchrun_record
from infra.slurm import ensure_packages_or_skip, skip_loudly
from runners import runtimes
from runners.runtimes import containerd
from runners.runtimes.base import Mount

ROOT_DIR = CACHE / "containerd"  # the daemon's images, kept between runs: the TF image is imported once per id
RUN_DIR = Path("/run/dlbench-containerd-test")  # its socket and state


def test_reference_names_docker_short_names_in_full():
    assert containerd.reference("dlbench-tensorflow") == "docker.io/library/dlbench-tensorflow:latest"
    assert containerd.reference("dlbench-torch:0.1.0") == "docker.io/library/dlbench-torch:0.1.0"
    assert containerd.reference("nvcr.io/nvidia/pytorch:24.01-py3") == "nvcr.io/nvidia/pytorch:24.01-py3"
    assert containerd.reference("localhost:5000/x") == "localhost:5000/x:latest"
    assert containerd.reference("someone/img@sha256:ab") == "docker.io/someone/img@sha256:ab"


def test_command_line(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("CONTAINERD_NAMESPACE", raising=False)
    cmd = runtimes.get("containerd").command(
        "dlbench-tensorflow:latest", ["bench", "--model", "alexnet"], env={"RANK": None, "DLBENCH_X": "y"},
        mounts=[Mount(str(tmp_path), "/data"), Mount(str(tmp_path), "/results", readonly=False)],
        workdir="/results", name="dlbench-ab-r1-7")
    assert cmd[1:] == [
        "--namespace", "dlbench", "run", "--rm", "--net-host",
        "--mount", "type=bind,src=/dev/shm,dst=/dev/shm,options=rbind:rw",
        "--env", "RANK=1", "--env", "DLBENCH_X=y",  # ctr has no pass-through form: the rank's value
        "--mount", f"type=bind,src={tmp_path},dst=/data,options=rbind:ro",
        "--mount", f"type=bind,src={tmp_path},dst=/results,options=rbind:rw",
        "--cwd", "/results", "docker.io/library/dlbench-tensorflow:latest", "dlbench-ab-r1-7", "bench", "--model", "alexnet"]


def test_gpus_are_named_by_index(tmp_path, monkeypatch):
    monkeypatch.setattr(containerd, "DEV", str(tmp_path))
    rt = runtimes.get("containerd")
    with pytest.raises(runtimes.base.UsageError, match="no .*/nvidiaN on this node"):
        rt.gpu_options()
    for name in ("nvidia1", "nvidia0", "nvidiactl", "nvidia-uvm", "nvidia10"):
        (tmp_path / name).touch()
    assert rt.gpu_options() == ["--gpus", "0", "--gpus", "1", "--gpus", "10"]


FAKE_CTR = """#!/usr/bin/env python3
import os, sys
log = os.environ["FAKE_LOG"]
args = sys.argv[3:]  # after --namespace NAME
open(log, "a").write(" ".join(args) + "\\n")
if args[:2] == ["images", "ls"]:
    imported = os.path.exists(log + ".imported")
    label = "io.dlbench.docker-id=sha256:" + ("new" if imported else "old")
    print("REF TYPE DIGEST SIZE PLATFORMS LABELS")
    print(f"docker.io/library/dlbench-tensorflow:latest application/x sha256:d 2.0 GiB linux/amd64 {label}")
elif args[:2] == ["images", "import"]:
    sys.stdin.buffer.read()
    if os.environ.get("FAKE_IMPORT_FAILS"):
        sys.exit("ctr: failed to prepare extraction snapshot: parent snapshot sha256:1 does not exist: not found")
    open(log + ".imported", "w").close()
"""
FAKE_DOCKER = """#!/bin/sh
case "$1" in image) echo sha256:new ;; save) echo tar ;; esac
"""


@pytest.mark.parametrize("fails", [False, True])
def test_a_rebuilt_image_is_imported_while_the_old_one_is_held(tmp_path, monkeypatch, fails):
    """The image being replaced keeps a second name until the import of the rebuilt one ends, ok or not, so that
    containerd's collector cannot take the layers they share mid-unpack (fake ctr and docker: the call order)."""
    for name, text in (("ctr", FAKE_CTR), ("docker", FAKE_DOCKER)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    log = tmp_path / "calls"
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_LOG", str(log))
    if fails:
        monkeypatch.setenv("FAKE_IMPORT_FAILS", "1")
    rt = runtimes.get("containerd")
    ref, held = "docker.io/library/dlbench-tensorflow:latest", containerd.HELD.format(pid=os.getpid())
    if fails:
        with pytest.raises(UsageError, match="parent snapshot sha256:1 does not exist"):
            rt.import_image("dlbench-tensorflow")
    else:
        assert rt.import_image("dlbench-tensorflow") == ref
    calls = [line for line in log.read_text().splitlines() if not line.startswith("images ls")]
    assert calls[:3] == [f"images tag --force {ref} {held}", "images import -", f"images rm {held}"]
    assert calls[3:] == ([f"images rm {ref}"] if fails else [f"images label {ref} io.dlbench.docker-id=sha256:new"])


def test_missing_ctr_is_one_line(tmp_path):
    """The absence is made here: an empty PATH (benchrun is started by its interpreter's path)."""
    result = benchrun("run", "--runtime", "containerd", "--", *TINY_TF, env={"PATH": str(tmp_path)})
    assert result.returncode == 2 and result.stderr == ("benchrun: error: runtime 'containerd' needs 'ctr', which is not "
                                                        "on PATH (Debian's containerd package, which docker.io depends on)\n")


@pytest.mark.slow
def test_silent_daemon_is_one_line(tmp_path):
    """As for Docker's daemon: a failure of the environment, recorded (a sweep goes on), exit 6."""
    if not runtimes.get("containerd").available():
        pytest.skip("ctr is not installed (test_missing_ctr_is_one_line covers its absence)")
    result, record = benchrun_record("run", "--runtime", "containerd", "--", *TINY_TF,
                                     env={"CONTAINERD_ADDRESS": str(tmp_path / "none.sock")})
    assert result.returncode == 6 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f'benchrun: error: the run failed: containerd does not answer (ctr: failed to dial '
                                    f'"{tmp_path}/none.sock"')
    assert record["status"] == "failed" and record["error"]["kind"] == "environment"


@pytest.fixture(scope="module")
def containerd_env(dlbench_images):
    """A containerd of our own (Debian's package; the Docker install brings it), stopped at the end."""
    docker_up(TF_IMAGE)
    ensure_packages_or_skip(("containerd",), "CONTAINERD")
    for path in (ROOT_DIR, RUN_DIR):
        path.mkdir(parents=True, exist_ok=True)
    socket = RUN_DIR / "containerd.sock"
    config = RUN_DIR / "config.toml"  # no Kubernetes CRI plugin: nothing here asks for it
    config.write_text('version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n')
    env = {"CONTAINERD_ADDRESS": str(socket)}
    if answers(env):  # one a killed test run left behind: use it, leave it
        yield env
        return
    with open(RUN_DIR / "containerd.log", "ab") as log:
        daemon = subprocess.Popen(["containerd", "--config", str(config), "--address", str(socket), "--root",
                                   str(ROOT_DIR), "--state", str(RUN_DIR / "state")], stdout=log, stderr=log,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not answers(env):
            if daemon.poll() is not None or time.monotonic() > deadline:
                skip_loudly(f"CONTAINERD TESTS SKIPPED: containerd did not start (see {RUN_DIR}/containerd.log)")
            time.sleep(0.5)
        yield env
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()


def answers(env) -> bool:
    return subprocess.run(["ctr", "version"], env={"PATH": "/usr/bin:/bin", **env}, capture_output=True).returncode == 0


def leftovers(env) -> list[str]:
    listed = subprocess.run(["ctr", "--namespace", "dlbench", "containers", "ls", "-q"], env={"PATH": "/usr/bin:/bin", **env},
                            capture_output=True, text=True, check=True)
    return [name for name in listed.stdout.split() if name.startswith("dlbench-")]


@pytest.mark.slow
def test_real_run_with_read_only_data(containerd_env, public_dataset, tmp_path):
    """The image is imported once per Docker image id (the second run does not import it again), runs as
    the image's user, reads the data read-only, writes the record; no container is left."""
    rt = runtimes.get("containerd")
    result, record = benchrun_record("run", "--runtime", "containerd", "--results", str(tmp_path), "--data-dir",
                                     str(public_dataset), "--", *TINY_TF, env=containerd_env)
    check_ok(result, record, "containerd")
    assert record["config"]["data_dir"] == "/data" and record["config"]["data"] == "real"
    assert record["provenance"]["runtime_version"].startswith("ctr ")
    assert json.loads((tmp_path / "records.jsonl").read_text())["run_id"] == record["run_id"]
    assert not leftovers(containerd_env)
    docker_id = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", TF_IMAGE], capture_output=True,
                               text=True).stdout.strip()
    with pytest.MonkeyPatch.context() as patch:
        for key, value in containerd_env.items():
            patch.setenv(key, value)
        assert rt.labels(containerd.reference(TF_IMAGE))[containerd.ID_LABEL] == docker_id
        t0 = time.monotonic()
        assert rt.prepare(TF_IMAGE) == "docker.io/library/dlbench-tensorflow:latest"
        assert time.monotonic() - t0 < 10, "the image was imported again"


@pytest.mark.slow
def test_inside_the_container(containerd_env, public_dataset, tmp_path):
    """Data read-only (a write fails), the rank's variables, the working directory, the image's user."""
    probe = ("touch /data/x 2>/dev/null && echo data-writable; echo \"$DLBENCH_PROBE $RANK $(pwd) $(id -u)\" "
             "> /results/probe")
    tmp_path.chmod(0o777)
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {**containerd_env, "RANK": "0"}.items():
            patch.setenv(key, value)
        rt = runtimes.get("containerd")
        image = rt.prepare(TF_IMAGE)
        cmd = rt.command(image, ["sh", "-c", probe], env={"DLBENCH_PROBE": "yes", "RANK": None}, workdir="/results",
                         mounts=[Mount(str(public_dataset), "/data"), Mount(str(tmp_path), "/results", readonly=False)],
                         name="dlbench-probe")
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "data-writable" not in done.stdout, done.stderr
    assert (tmp_path / "probe").read_text().split() == ["yes", "0", "/results", "1000"]
    assert not leftovers(containerd_env)


@pytest.mark.slow
def test_timeout_and_sigint_leave_no_container(containerd_env):
    """ctr forwards the signal to bench (the record says interrupted), then removes the container."""
    timeout_and_sigint_leave_no_container("containerd", lambda: leftovers(containerd_env), env=containerd_env)


@pytest.mark.slow
def test_srun_two_emulated_nodes_tf_allreduce(containerd_env, slurm_two_nodes):
    """The hybrid model: srun starts one `ctr run` per rank, each rank's variables set inside."""
    result, record = benchrun_record("run", "--runtime", "containerd", "--launcher", "srun", "-n", "2",
                                     "--launcher-arg=--nodes=2", "--", *TINY_TF, "--strategy", "allreduce",
                                     env={**slurm_two_nodes["env"], **containerd_env, "DLBENCH_COORDINATOR": "127.0.0.1"})
    check_ok(result, record, "containerd")
    assert record["world"]["nodes"] == 2 and {r["host"] for r in record["ranks"]} == {"node1", "node2"}
    assert record["replicas"]["in_sync"] and not leftovers(containerd_env)


@pytest.mark.slow
def test_bad_image_is_one_line_and_leaves_nothing(containerd_env):
    result = benchrun("run", "--runtime", "containerd", "--image", "dlbench-no-such-image:1", "--", *TINY_TF,
                      env=containerd_env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == ("benchrun: error: image 'dlbench-no-such-image:1' not found by containerd, "
                                     "nor in a local Docker engine to import it from")
    assert not leftovers(containerd_env)
