"""podman-hpc (NERSC): its exact command lines, and real runs with podman-hpc installed by
scripts/install-podman-hpc.sh (PyPI 1.2.2 + Debian podman + a static mksquashfs): a single run with
the data mounted read-only, `srun -n 2` on one node (--mpi: podman-hpc's shared run) and on two
emulated nodes, and the bad inputs (binary missing, image not importable, not migrated, a migrate
that fails) as one line, exit 2, nothing left behind; and ReFrame's DlbenchTrain check through benchrun.
The TensorFlow image (1.9 GB, a third of the torch image) is migrated once per image id; runs are tiny
(64 px, batch 2)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_reframe import SYSTEM as REFRAME_SYSTEM
from test_reframe import reframe, reframe_path, site_settings  # noqa: F401 - reframe_path: a fixture, requested by name
from test_runtimes_hpc import dirs, mounts  # noqa: F401  (the results/data directories, their Mounts)

from benchmarks.core.processes import descendants
from infra import podman_hpc
from infra.docker import derived_image, one_file_image
from infra.helpers import ROOT, SCHEMA, Started, benchrun, last_json_line, python_env, validate_record
from runners import runtimes
from runners.runtimes.base import Mount
from runners.runtimes.container import ContainerSpec
from runners.runtimes.podman_hpc import LABEL, SquashSnapshot, exec_session_processes, squash_dir

IMAGE = "dlbench-tensorflow:podman-hpc-test"
TINY = ["--framework", "tensorflow", "--model", "alexnet", "--image-size", "64", "--batch-size", "2",
        "--num-warmup-batches", "1", "--num-batches", "2", "--num-threads", "1"]


# ---- exact command lines --------------------------------------------------------------

def test_podman_hpc_argv(dirs):
    r, d = dirs
    cmd = runtimes.get("podman-hpc").command("dlbench-torch:latest", ["bench", "--model", "resnet50"],
                                             env={"RANK": None, "DLBENCH_X": "1"}, mounts=mounts(dirs),
                                             workdir="/results", name="dlbench-abc-r0-12", gpus=True)
    assert [os.path.basename(cmd[0]), *cmd[1:]] == [
        "podman-hpc", "run", "--rm", "--name", "dlbench-abc-r0-12", "--network=host", "--ipc=host", "--gpu", "--nccl",
        "-e", "RANK", "-e", "DLBENCH_X=1", "-v", f"{r}:/results", "-v", f"{d}:/data:ro", "-w", "/results",
        "--entrypoint", "bench", "dlbench-torch:latest", "--model", "resnet50"]


def test_podman_hpc_mpi_is_a_shared_run_labelled_with_the_run(dirs):
    r, d = dirs
    spec = ContainerSpec(runtime="podman-hpc", image="dlbench-torch:latest", name="dlbench-abc", mounts=mounts(dirs),
                         workdir="/results", mpi=True)
    cmd, name = spec.command(runtimes.get(spec.runtime), ["bench", "--model", "resnet50"],
                             environ={"SLURM_PROCID": "1", "RANK": "1"})
    # No --name (podman-hpc names the node's container), no ENTRYPOINT (it runs `sleep infinity`,
    # each rank is `podman exec`'d), no --network (the MPI module's own): the run's name is a label.
    assert name == "dlbench-abc" and "--name" not in cmd
    assert [os.path.basename(cmd[0]), *cmd[1:]] == [
        "podman-hpc", "run", "--rm", "--mpi", "-e", "RANK", "-e", "SLURM_PROCID",
        "-v", f"{r}:/results", "-v", f"{d}:/data:ro", "-w", "/results", "--label", f"{LABEL}=dlbench-abc",
        "--entrypoint=", "dlbench-torch:latest", "bench", "--model", "resnet50"]
    assert runtimes.get("podman-hpc").client(spec).shared
    assert not runtimes.get("podman-hpc").client(ContainerSpec("podman-hpc", "dlbench-torch:latest")).shared


def test_squash_snapshot_restores_the_store(tmp_path):
    store = tmp_path / "storage"
    (store / "overlay-images").mkdir(parents=True)
    (store / "overlay" / "l").mkdir(parents=True)
    (store / "overlay-images" / "images.json").write_text("[]")
    (store / "overlay" / "l" / "OLD.squash").write_text("kept")
    snapshot = SquashSnapshot(store)
    (store / "overlay-images" / "images.json").write_text('[{"id": "half"}]')
    (store / "overlay" / "l" / "NEW.squash").write_text("half-written")
    (store / "overlay" / "abc" / "diff").mkdir(parents=True)
    snapshot.restore()
    assert sorted(str(p.relative_to(store)) for p in store.rglob("*")) == [
        "overlay", "overlay-images", "overlay-images/images.json", "overlay/l", "overlay/l/OLD.squash"]
    assert (store / "overlay-images" / "images.json").read_text() == "[]"
    assert squash_dir({"SCRATCH": "/s"}) == Path("/s/storage") and squash_dir({"SQUASH_DIR": "/q"}) == Path("/q")


def fake_conmon(script, *args) -> subprocess.Popen:
    """A process whose argv is `conmon SCRIPT ARGS...` (sh running `script` under that name), with a child."""
    return subprocess.Popen(["conmon", str(script), *args], executable="/bin/sh")


def test_exec_sessions_are_found_by_their_conmon(tmp_path):
    """The ranks to stop in a shared container are the children of its exec sessions' conmon only: not
    the container's own init (its conmon has no --exec-process-spec), not another container's ranks."""
    script = tmp_path / "conmon.sh"
    script.write_text("sleep 60\n")
    cid, other = "a" * 64, "b" * 64
    sessions = [fake_conmon(script, "--api-version", "1", "-c", cid, "-u", "e" * 64, "--exec-process-spec", "spec"),
                fake_conmon(script, "-c", cid, "-u", cid),  # the container's own conmon: its init
                fake_conmon(script, "-c", other, "-u", "f" * 64, "--exec-process-spec", "spec")]
    try:
        deadline = time.monotonic() + 30
        while not all(descendants(proc.pid) for proc in sessions) and time.monotonic() < deadline:
            time.sleep(0.05)  # every fake conmon has its child: a wrong match could not hide
        assert exec_session_processes(cid) == descendants(sessions[0].pid) != []
        assert exec_session_processes("c" * 64) == []
    finally:
        for proc in sessions:
            for pid in descendants(proc.pid):
                os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait()


def test_dry_run_shows_podman_hpc_under_srun(tmp_path):
    for name in ("podman-hpc", "srun"):  # found on PATH, never run by a dry run
        (tmp_path / name).write_text("#!/bin/sh\nexit 0\n")
        (tmp_path / name).chmod(0o755)
    out = benchrun("run", "--dry-run", "--runtime", "podman-hpc", "--mpi", "--gpus", "--launcher", "srun", "-n", "2",
                   "--", "--model", "resnet50", env={"PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert out.returncode == 0, out.stderr
    token, *argv = out.stdout.split()
    start = argv.index("podman-hpc")
    assert token.startswith("DLBENCH_RUN_TOKEN=") and argv[0] == "srun"
    assert argv[start:start + 6] == ["podman-hpc", "run", "--rm", "--gpu", "--nccl", "--mpi"]
    assert "--entrypoint=" in argv and "runners.runtimes" not in out.stdout


def test_missing_podman_hpc_is_one_line_exit_2(tmp_path):
    out = benchrun("run", "--runtime", "podman-hpc", "--", "--model", "resnet50",
                   env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "runtime 'podman-hpc' needs 'podman-hpc'" in out.stderr and "scripts/install-podman-hpc.sh" in out.stderr


# ---- real runs --------------------------------------------------------------------------

@pytest.fixture(scope="session")
def podman_hpc_bin():
    return podman_hpc.install()


@pytest.fixture(scope="session")
def tf_image(podman_hpc_bin, dlbench_images):
    """This checkout's TF image under a tag of its own (other checkouts on the machine retag :latest)."""
    subprocess.run(["docker", "tag", dlbench_images["tensorflow"], IMAGE], check=True)
    return podman_hpc.imported(IMAGE, podman_hpc_bin)


def leftovers(bin_dir) -> list[str]:
    """Containers of ours podman-hpc still has (named dlbench-*, labelled, or shared runs: uid-*-pid-*),
    and squashfs mounts of its store (podman-hpc's own unmount helper dies with a killed run)."""
    out = subprocess.run(["podman-hpc", "ps", "-a", "--format", "json"], capture_output=True, text=True,
                         env=podman_hpc.env(bin_dir)).stdout
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
              if line.split()[1].startswith(f"{squash_dir()}/")]
    return [n for c in json.loads(out or "[]") for n in c.get("Names") or []
            if n.startswith(("dlbench-", "uid-")) or LABEL in (c.get("Labels") or {})] + mounts


def run_podman_hpc(bin_dir, *args, environ=None, timeout=900):
    result = subprocess.run([sys.executable, "-m", "runners", "run", "--runtime", "podman-hpc", "--image", IMAGE, *args],
                            cwd=ROOT,
                            env={**podman_hpc.env(bin_dir), **(environ or {})}, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    record = last_json_line(result.stdout)
    if record.get("schema_version") == SCHEMA["properties"]["schema_version"]["const"]:
        validate_record(record)
    assert record["status"] == "ok", record.get("error")
    assert record["provenance"]["requested_runtime"] == "podman-hpc"
    assert record["provenance"]["container_runtime"] == "podman"  # podman-hpc runs podman containers
    assert not leftovers(bin_dir)
    return record


@pytest.mark.slow
def test_real_run_with_read_only_data(podman_hpc_bin, tf_image, tmp_path):
    data = Path("/tmp") / f"dlbench-phpc-data-{os.getpid()}"  # world-readable: the image's user reads it
    made = subprocess.run([sys.executable, "-m", "benchmarks", "make-dataset", str(data), "--images", "8",
                           "--classes", "2", "--min-size", "64", "--max-size", "80"], cwd=ROOT, env=python_env(),
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    try:
        for path in [data, *data.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        record = run_podman_hpc(podman_hpc_bin, "--data-dir", str(data), "--", *TINY)
        assert record["config"]["data_dir"] == "/data" and record["config"]["data"] == "real"
        assert record["throughput"]["images_per_sec"] > 0
        # The same mounts, a shell instead of bench: the data is read-only, the results directory is not.
        results = tmp_path / "results"
        results.mkdir(mode=0o777)
        results.chmod(0o777)
        cmd = runtimes.get("podman-hpc").command(
            tf_image, ["sh", "-c", "touch /results/ok && touch /data/x"], mounts=[
                Mount(str(results), "/results", readonly=False), Mount(str(data), "/data")], workdir="/results")
        tried = subprocess.run(cmd, capture_output=True, text=True, env=podman_hpc.env(podman_hpc_bin), timeout=300)
        assert tried.returncode != 0 and "Read-only file system" in tried.stderr, tried.stderr
        assert (results / "ok").exists() and not (data / "x").exists()
    finally:
        subprocess.run(["rm", "-rf", str(data)])


def allreduce() -> list[str]:
    """TF allreduce over 2 ranks (on the ports their run token picks)."""
    return [*TINY, "--strategy", "allreduce"]


@pytest.mark.slow
def test_srun_one_node_mpi_shared_run(podman_hpc_bin, tf_image, slurm_single):
    record = run_podman_hpc(podman_hpc_bin, "--mpi", "--launcher", "srun", "-n", "2", "--", *allreduce(),
                            environ={**slurm_single["env"], "PATH": podman_hpc.env(podman_hpc_bin)["PATH"],
                                     "DLBENCH_COORDINATOR": "127.0.0.1"})
    assert len(record["ranks"]) == 2 and record["replicas"]["in_sync"] and record["world"]["nodes"] == 1


@pytest.mark.slow
def test_srun_two_emulated_nodes(podman_hpc_bin, tf_image, slurm_two_nodes):
    record = run_podman_hpc(podman_hpc_bin, "--launcher", "srun", "-n", "2", "--launcher-arg=--nodes=2", "--", *allreduce(),
                            environ={**slurm_two_nodes["env"], "PATH": podman_hpc.env(podman_hpc_bin)["PATH"],
                                     "DLBENCH_COORDINATOR": "127.0.0.1"})
    assert record["world"]["nodes"] == 2 and {r["host"] for r in record["ranks"]} == {"node1", "node2"}


@pytest.mark.slow
def test_reframe_check_through_benchrun(podman_hpc_bin, tf_image, reframe_path, tmp_path):
    """ReFrame has no container platform for podman-hpc: its DlbenchTrain check runs `benchrun run --runtime
    podman-hpc --image IMAGE -- bench ...` on a partition listing podman-hpc (one rank, TensorFlow AlexNet at
    64 px). Here, not in test_reframe.py: podman-hpc's containers are this module's to count (leftovers)."""
    settings = site_settings(tmp_path, f"""local = partitions[0]
local['features'].append('podman-hpc')
local['extras']['dlbench_images'] = {{'podman-hpc': {{'tensorflow': {tf_image!r}}}}}
""")
    done = reframe(reframe_path, tmp_path, "--system", f"{REFRAME_SYSTEM}:local", "-n",
                   "DlbenchTrain%framework=tensorflow%model=alexnet%strategy=none%ranks=1%runtime=podman-hpc$",
                   "-r", "--performance-report", settings=settings, env={"PATH": podman_hpc.env(podman_hpc_bin)["PATH"]})
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    assert "Ran 1/1 test case(s)" in out and re.search(r"P: images_per_sec: [0-9.]+ img/s", out), out[-3000:]
    script = next((tmp_path / "rfm").rglob("rfm_job.sh")).read_text()
    assert f"run --runtime podman-hpc --image {tf_image} -- --framework tensorflow --model alexnet" in script, script
    record = last_json_line(next((tmp_path / "rfm").rglob("rfm_job.out")).read_text())
    assert record["provenance"]["requested_runtime"] == "podman-hpc" and record["status"] == "ok"
    assert record["provenance"]["container_runtime"] == "podman"  # detected inside: podman-hpc runs podman
    assert not leftovers(podman_hpc_bin)


LONG = [*TINY[:-4], "--num-batches", "100000", "--num-threads", "1"]


@pytest.mark.slow
def test_timeout_leaves_no_container(podman_hpc_bin, tf_image):
    result = subprocess.run([sys.executable, "-m", "runners", "run", "--runtime", "podman-hpc", "--image", IMAGE,
                             "--timeout", "15", "--", *LONG], cwd=ROOT, env=podman_hpc.env(podman_hpc_bin),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 4 and last_json_line(result.stdout)["status"] == "timeout", result.stderr[-2000:]
    assert not leftovers(podman_hpc_bin)


@pytest.mark.slow
def test_sigint_of_a_shared_run_leaves_no_container(podman_hpc_bin, tf_image):
    """--mpi: the node's container is podman-hpc's (uid-*-pid-*); benchrun removes it by its label."""
    started = Started([sys.executable, "-m", "runners", "run", "--runtime", "podman-hpc", "--image", IMAGE, "--mpi",
                       "--", *LONG], env=podman_hpc.env(podman_hpc_bin))
    started.wait_for("bench: building", timeout=180)  # SIGINT before bench runs leaves no record to check
    assert leftovers(podman_hpc_bin), "bench is up but the shared container is not listed"
    started.proc.send_signal(signal.SIGINT)
    out, err = started.communicate(timeout=180)
    assert started.proc.returncode == 130 and last_json_line(out)["status"] == "interrupted", err[-2000:]
    assert not leftovers(podman_hpc_bin)


# ---- bad input, for real: one line, exit 2, nothing left behind ----------------------------

@pytest.fixture()
def small_image(podman_hpc_bin, docker):
    image = f"dlbench-phpc-test:{os.getpid()}"
    one_file_image(image, ROOT / "scripts" / "ensure-packages.sh")
    yield image
    subprocess.run(["docker", "rmi", "-f", image], capture_output=True)
    subprocess.run(["podman-hpc", "rmi", "-f", image], capture_output=True, env=podman_hpc.env(podman_hpc_bin))
    subprocess.run(["podman-hpc", "rmsqi", image], capture_output=True, env=podman_hpc.env(podman_hpc_bin))


def store_state(bin_dir):
    store = squash_dir()
    files = sorted(str(p) for p in store.rglob("*")) if store.is_dir() else []
    indexes = [(store / rel).read_text() if (store / rel).is_file() else None
               for rel in ("overlay-images/images.json", "overlay-layers/layers.json")]
    images = subprocess.run(["podman-hpc", "images", "-a", "--format", "{{.ID}}"], capture_output=True, text=True,
                            env=podman_hpc.env(bin_dir)).stdout.split()
    return files, indexes, sorted(images), leftovers(bin_dir)


def refused(bin_dir, image, message, **environ):
    out = subprocess.run([sys.executable, "-m", "runners", "run", "--runtime", "podman-hpc", "--image", image, "--",
                          *TINY], cwd=ROOT, env={**podman_hpc.env(bin_dir), **environ}, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_image_not_importable(podman_hpc_bin):
    before = store_state(podman_hpc_bin)
    refused(podman_hpc_bin, "dlbench-no-such-image:0", "not migrated for podman-hpc (podman-hpc images) and not in "
                                                       "a local Docker engine")
    assert store_state(podman_hpc_bin) == before


@pytest.mark.slow
def test_image_pulled_but_not_migrated(podman_hpc_bin, small_image):
    phpc = podman_hpc.env(podman_hpc_bin)
    pulled = subprocess.run(["podman-hpc", "pull", f"docker-daemon:{small_image}"], capture_output=True, text=True,
                            env=phpc)
    assert pulled.returncode == 0, pulled.stderr
    subprocess.run(["docker", "rmi", small_image], capture_output=True, check=True)  # only podman-hpc has it now
    before = store_state(podman_hpc_bin)
    refused(podman_hpc_bin, small_image, f"run `podman-hpc migrate {small_image}`")
    assert store_state(podman_hpc_bin) == before


@pytest.mark.slow
def test_failed_migrate_leaves_nothing(podman_hpc_bin, small_image):
    before = store_state(podman_hpc_bin)
    # A dynamic binary as mksquashfs: podman-hpc runs it inside the image (no libc there), migrate fails.
    refused(podman_hpc_bin, small_image, f"podman-hpc migrate {small_image} made no squashed image",
            PODMANHPC_MKSQUASHFS_BIN="/bin/true")
    assert store_state(podman_hpc_bin) == before


@pytest.mark.slow
def test_reimport_removes_the_squashed_copy_it_replaced(podman_hpc_bin, docker, tmp_path):
    """A rebuilt image's squashed copy replaces the earlier one's (a full squashfs per rebuild piled up),
    except after a rebuild that changed only a label: the two share a top layer, whose squashfs rmsqi
    would delete from under the new copy."""
    image, store = f"dlbench-phpc-rebuild-test:{os.getpid()}", tmp_path / "squash"
    phpc = podman_hpc.env(podman_hpc_bin, SQUASH_DIR=str(store))  # a store of its own: no other test's mounts

    def imported() -> dict[str, dict]:
        done = subprocess.run([sys.executable, "-c", f"from runners.runtimes import get\n"
                               f"get('podman-hpc').import_image({image!r})"], cwd=ROOT, env=phpc,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        return {i["id"]: i for i in json.loads((store / "overlay-images" / "images.json").read_text())}

    ids = []
    try:
        ids.append(one_file_image(image, ROOT / "scripts" / "ensure-packages.sh"))
        assert set(imported()) == {ids[0]}
        ids.append(one_file_image(image, ROOT / "scripts" / "install-podman-hpc.sh"))  # a new top layer
        assert set(imported()) == {ids[1]}  # the earlier copy went, with its squashfs
        assert len(list((store / "overlay" / "l").glob("*.squash"))) == 1
        ids.append(derived_image(image, image, "LABEL io.dlbench.test-rebuild=1").removeprefix("sha256:"))
        index = imported()
        assert set(index) == {ids[1], ids[2]} and index[ids[1]]["names"] == []  # shares the top layer: kept
        link = (store / "overlay" / index[ids[2]]["layer"] / "link").read_text().strip()
        assert (store / "overlay" / "l" / f"{link}.squash").is_file()
    finally:
        subprocess.run(["docker", "rmi", "-f", image, *ids], capture_output=True)
        for squashed in (*reversed(ids), image):
            subprocess.run(["podman-hpc", "rmsqi", squashed], capture_output=True, env=phpc)
