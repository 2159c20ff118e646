"""Apptainer (and `singularity`, the same binary) for real: installed by scripts/install-apptainer.sh
(Debian sid's package beside a private newer libc), the images as SIFs made once per Docker image id
and from Singularity.def, runs as root and as an unprivileged user, under srun on one and two emulated
nodes, the Horovod MPICH image under the host's Hydra, stops that leave nothing, and the bad inputs as
one line, exit 2, nothing left. Runs are tiny (64 px, batch 2); the SIFs are lz4 and kept outside the
clone (~/.cache/dlbench/sif, keyed on the image id and the recipe)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from test_runtimes_real import DDP, TINY_TF, public_dataset, validate_in_image  # noqa: F401 (a fixture)

from benchmarks.core.errors import UsageError
from infra import apptainer
from infra.cache import CACHE, inputs_key, once
from infra.helpers import ROOT, SCHEMA, Started, last_json_line, python_env
from infra.images import BASE_IMAGE
from infra.slurm import skip_loudly
from infra.unprivileged import UNPRIVILEGED_HOME, as_nobody, unprivileged_user
from runners import runtimes
from runners.runtimes import singularity
from runners.runtimes.base import Mount

pytestmark = pytest.mark.slow
SIF_DIR = CACHE / "sif"  # the runtime's own SIFs of Docker images (DLBENCH_SIF_DIR's default)
DEF_SIFS = CACHE / "sif-def"  # SIFs built from Singularity.def, one per framework, keyed on the recipe and image id
HYDRA = "mpirun.mpich"


@pytest.fixture(scope="session")
def apptainer_bin():
    return apptainer.install()


def def_sif(apptainer_bin: str, framework: str, image: str) -> str:
    """`apptainer build --build-arg FRAMEWORK=... X.sif Singularity.def`, bootstrapping from the image saved as
    an OCI layout (BOOTSTRAP=oci, the recipe's own fast path: docker-daemon would gzip every layer on one
    core; that default is built for real in test_recipe_default_bootstraps_from_the_docker_daemon)."""
    tag = image.split(":")[-1]
    image_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", image], capture_output=True,
                              text=True).stdout.strip()
    target = DEF_SIFS / f"dlbench-{framework}.sif"

    def build() -> str:
        DEF_SIFS.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)  # built from an earlier image or recipe: its room is needed (~3x the image)
        try:  # the runtime's own rule: a full disk here would fail every later test, not only this one
            singularity.check_room(image, DEF_SIFS)
        except UsageError as error:
            skip_loudly(f"SINGULARITY.DEF ({framework}) NOT BUILT: {error}")
        with apptainer.heavy_work(), tempfile.TemporaryDirectory(prefix=f".{framework}-oci-", dir=DEF_SIFS) as layout:
            singularity.save_oci_layout(image, Path(layout))
            said = singularity.build_from_layout(
                [f"{apptainer_bin}/apptainer", "build", "--force", "--disable-cache",
                 "--mksquashfs-args", singularity.MKSQUASHFS_ARGS, "--build-arg", f"FRAMEWORK={framework}",
                 "--build-arg", f"DLBENCH_TAG={tag}", "--build-arg", "BOOTSTRAP=oci", "--build-arg", f"FROM={layout}",
                 f"{target}.partial",
                 str(ROOT / "Singularity.def")], Path(layout))
        assert said is None, f"Singularity.def ({framework}) did not build: {said}"
        os.replace(f"{target}.partial", target)
        return str(target)

    return once(f"sif-def-{framework}", inputs_key(["Singularity.def"], [image_id, singularity.MKSQUASHFS_ARGS]),
                build, lambda text: Path(text).is_file())


@pytest.fixture(scope="session")
def tf_sif(apptainer_bin, dlbench_images):
    """The runs' SIF (a SIF given by path; the Docker-image path is the same once converted: tested with
    the small base image below, so that a cold run converts each big image once, not twice)."""
    return def_sif(apptainer_bin, "tensorflow", dlbench_images["tensorflow"])


@pytest.fixture(scope="session")
def torch_sif(apptainer_bin, dlbench_images):
    """Its own fixture: the torch image (CUDA wheels) is three times the TF one, and a disk too full for
    its SIF skips only the tests that run it."""
    return def_sif(apptainer_bin, "torch", dlbench_images["torch"])


def benchrun_apptainer(bin_dir, *args, runtime="apptainer", environ=None, timeout=900):
    environ = dict(environ or {})
    path = environ.pop("PATH", os.environ["PATH"])  # a cluster's own (srun), with Apptainer first
    done = subprocess.run([sys.executable, "-m", "runners", "run", "--runtime", runtime, *args], cwd=ROOT,
                          env={**apptainer.env(bin_dir), **environ, "PATH": f"{bin_dir}:{path}"}, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    return done, (last_json_line(done.stdout) if "{" in done.stdout else None)


def check_ok(done, record, runtime="apptainer"):
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    validate_in_image(record)
    assert record["status"] == "ok", record.get("error")
    assert record["provenance"]["container_runtime"] == "apptainer"  # detected from inside (APPTAINER_CONTAINER)
    assert record["provenance"]["requested_runtime"] == runtime
    if record.get("schema_version") == SCHEMA["properties"]["schema_version"]["const"]:  # an image of this tree
        assert record["provenance"]["runtime_version"].startswith("apptainer version ")
    assert not leftovers()
    return record


def leftovers() -> list[str]:
    """What a run of ours may leave: Apptainer's starter ("Apptainer runtime parent"), squashfuse of a SIF
    of ours, and mounts under an Apptainer session directory."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if cmdline.startswith("Apptainer runtime parent") or (
                "squashfuse" in (proc.info["name"] or "") and ".sif" in cmdline and "dlbench" in cmdline):
            found.append(f"{proc.pid} {cmdline[:120]}")
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    return found + [line.split()[1] for line in mounts if "/apptainer/mnt/session" in line.split()[1]]


# ---- install ---------------------------------------------------------------------------------

def test_install_is_cached_and_gives_both_names(apptainer_bin):
    t0 = time.monotonic()
    again = subprocess.run([str(apptainer.INSTALL)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout.strip() == f'export PATH="{apptainer_bin}:$PATH"'
    assert time.monotonic() - t0 < 10, "a second install downloaded again"
    prefix = Path(apptainer_bin).parent
    versions = dict(line.split("=", 1) for line in (prefix / "versions").read_text().split())
    assert set(versions) == {"apptainer", "libc6", "libseccomp2", "libsqlite3-0"}
    for name in ("apptainer", "singularity"):
        said = subprocess.run([f"{apptainer_bin}/{name}", "--version"], capture_output=True, text=True)
        assert said.returncode == 0 and said.stdout.strip() == f"apptainer version {versions['apptainer'].split('-')[0]}"
    libc = subprocess.run(["ldd", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    assert versions["libc6"].split("-")[0] not in libc, "the system's libc was replaced"


def test_unknown_install_option_is_one_line():
    done = subprocess.run([str(apptainer.INSTALL), "--bogus"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "'--bogus'" in done.stderr


# ---- images ----------------------------------------------------------------------------------

def labels(sif: str, bin_dir: str, monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("PATH", apptainer.env(bin_dir)["PATH"])
    return runtimes.get("apptainer").image_labels(sif)


def test_docker_image_becomes_a_sif_once(apptainer_bin, dlbench_images, monkeypatch):
    """`benchrun run --runtime apptainer --image DOCKER-IMAGE` converts once per image id (the small base
    image here; the big ones in perf/ and the Horovod test), and another tag of it reuses the SIF."""
    image_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", BASE_IMAGE], capture_output=True,
                              text=True).stdout.strip()
    (SIF_DIR / f"{image_id.removeprefix('sha256:')[:16]}.sif").unlink(missing_ok=True)  # converted here, every run
    sif = apptainer.sif(BASE_IMAGE, apptainer_bin)
    assert Path(sif).name == f"{image_id.removeprefix('sha256:')[:16]}.sif" and Path(sif).parent == SIF_DIR
    mtime = Path(sif).stat().st_mtime_ns
    other_tag = "dlbench-base:apptainer-test"
    subprocess.run(["docker", "tag", BASE_IMAGE, other_tag], check=True)
    try:
        t0 = time.monotonic()
        assert apptainer.sif(other_tag, apptainer_bin) == sif
        assert time.monotonic() - t0 < 30 and Path(sif).stat().st_mtime_ns == mtime, "the SIF was built again"
    finally:
        subprocess.run(["docker", "rmi", other_tag], capture_output=True)  # the tag only: the image stays
    assert labels(sif, apptainer_bin, monkeypatch)["org.label-schema.usage.singularity.deffile.bootstrap"] == "oci"
    assert not list(SIF_DIR.glob(".*-oci-*")), "the OCI layout the SIF was built from is left"



def test_sifs_of_rebuilt_images_are_removed(tmp_path, dlbench_images):
    """A rebuilt image's old SIF (gigabytes) is never used again: it goes, with the names pointing at it;
    the SIF of an image still tagged stays (files stand in for SIFs: only names and ids matter here)."""
    image_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", BASE_IMAGE], capture_output=True,
                              text=True, check=True).stdout.strip().removeprefix("sha256:")
    current, gone, unnamed = f"{image_id[:16]}.sif", "0123456789abcdef.sif", f"{image_id[16:32]}.sif"
    for name in (current, gone, unnamed):
        (tmp_path / name).write_bytes(b"sif")
    (tmp_path / "dlbench-base-bookworm.image").write_text(current + "\n")
    (tmp_path / "dlbench-torch-old.image").write_text(gone + "\n")
    singularity.remove_stale(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([current, "dlbench-base-bookworm.image"])

@pytest.mark.parametrize("framework", ["tensorflow", "torch"])
def test_singularity_def_builds_and_runs_bench(apptainer_bin, framework, monkeypatch, request):
    sif = request.getfixturevalue({"tensorflow": "tf_sif", "torch": "torch_sif"}[framework])
    helped = subprocess.run(["apptainer", "run", *(["--userns"] if singularity.needs_userns() else []), sif, "--help"],
                            capture_output=True, text=True, env=apptainer.env(apptainer_bin), timeout=300)
    assert helped.returncode == 0 and "usage: bench" in helped.stdout, helped.stderr[-2000:]
    found = labels(sif, apptainer_bin, monkeypatch)
    assert found["io.dlbench.framework"] == framework  # the recipe's label
    assert found["org.label-schema.usage.singularity.deffile.bootstrap"] == "oci"


def test_recipe_default_bootstraps_from_the_docker_daemon(apptainer_bin, dlbench_images, tmp_path, monkeypatch):
    """Singularity.def as a user builds it, no bootstrap argument: docker-daemon, FROM derived from FRAMEWORK
    and DLBENCH_TAG (here naming a tag of the small base image: the big ones go through BOOTSTRAP=oci)."""
    sif = tmp_path / "default.sif"
    subprocess.run(["docker", "tag", BASE_IMAGE, "dlbench-recipe-test:latest"], check=True)
    try:
        with apptainer.heavy_work():
            done = subprocess.run([f"{apptainer_bin}/apptainer", "build", "--disable-cache", "--build-arg",
                                   "FRAMEWORK=recipe-test", str(sif), str(ROOT / "Singularity.def")],
                                  capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    finally:
        subprocess.run(["docker", "rmi", "dlbench-recipe-test:latest"], capture_output=True)  # the tag only
    assert done.returncode == 0, done.stderr[-2000:]
    found = labels(str(sif), apptainer_bin, monkeypatch)
    assert found["org.label-schema.usage.singularity.deffile.bootstrap"] == "docker-daemon"
    assert found["org.label-schema.usage.singularity.deffile.from"] == "dlbench-recipe-test:latest"


# ---- runs as root --------------------------------------------------------------------------

@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_root_run_with_read_only_data(apptainer_bin, tf_sif, public_dataset, tmp_path, runtime):
    done, record = benchrun_apptainer(apptainer_bin, "--image", tf_sif, "--data-dir",
                                      str(public_dataset), "--results", str(tmp_path), "--", *TINY_TF, runtime=runtime)
    check_ok(done, record, runtime)
    assert record["config"]["data_dir"] == "/data" and record["config"]["data"] == "real"
    assert json.loads((tmp_path / "records.jsonl").read_text())["run_id"] == record["run_id"]


def test_mounts_environment_and_workdir_inside(apptainer_bin, tf_sif, public_dataset, tmp_path):
    """The runtime's own command with a shell instead of bench: data read-only, results writable, the
    working directory and environment set, and the image's bench, not the host's (PYTHONPATH kept out)."""
    results = tmp_path / "results"
    results.mkdir()
    probe = ("pwd; echo env=$DLBENCH_PROBE; touch /results/ok; python -c 'import benchmarks; print(benchmarks.__file__)';"
             " touch /data/x")
    cmd = runtimes.get("apptainer").command(tf_sif, ["sh", "-c", probe], env={"DLBENCH_PROBE": "yes"}, mounts=[
        Mount(str(results), "/results", readonly=False), Mount(str(public_dataset), "/data")], workdir="/results")
    tried = subprocess.run(cmd, capture_output=True, text=True, env=apptainer.env(apptainer_bin), timeout=300)
    assert tried.returncode != 0 and "Read-only file system" in tried.stderr, tried.stderr
    lines = tried.stdout.split()
    assert lines[0] == "/results" and "env=yes" in lines and lines[-1].startswith("/opt/venv/"), tried.stdout
    assert (results / "ok").exists() and not (public_dataset / "x").exists()


# ---- the unprivileged user -----------------------------------------------------------------------

def test_unprivileged_user_runs_a_sif(apptainer_bin, tf_sif):
    """As sites run it: a user's own install (install-apptainer.sh as that user), benchrun from its own venv,
    the SIF given by path; /dev/fuse usable by that user (squashfuse); without it, one line."""
    venv = unprivileged_user()
    sif = apptainer.copy_for_nobody(tf_sif)
    results = UNPRIVILEGED_HOME / f"results-{os.getpid()}"
    run = (f'eval "$({apptainer.INSTALL})" && mkdir -p {results} && {venv}/bin/python -m runners run --runtime '
           f'apptainer --image {sif} --results {results} -- ' + " ".join(TINY_TF))
    try:
        refused = as_nobody(run)
        assert refused.returncode == 2 and refused.stderr.splitlines()[-1].startswith("benchrun: error: "), refused.stderr
        assert "/dev/fuse" in refused.stderr.splitlines()[-1] and "Traceback" not in refused.stderr
        with apptainer.fuse_for("nobody"):
            done = as_nobody(run)
        assert done.returncode == 0, done.stderr[-3000:]
        record = validate_in_image(last_json_line(done.stdout))
        assert record["status"] == "ok" and record["provenance"]["container_runtime"] == "apptainer"
        assert (results / "records.jsonl").stat().st_uid == 65534  # written as the user, not root
        assert not leftovers()
    finally:
        shutil.rmtree(results, ignore_errors=True)


# ---- srun (the hybrid model) and Hydra -----------------------------------------------------------

def allreduce() -> list[str]:
    return [*TINY_TF, "--strategy", "allreduce"]


def test_srun_one_node_tf_allreduce(apptainer_bin, tf_sif, slurm_single):
    done, record = benchrun_apptainer(apptainer_bin, "--image", tf_sif, "--launcher", "srun",
                                      "-n", "2", "--", *allreduce(),
                                      environ={**slurm_single["env"], "DLBENCH_COORDINATOR": "127.0.0.1"})
    check_ok(done, record)
    assert len(record["ranks"]) == 2 and record["replicas"]["in_sync"] and record["world"]["nodes"] == 1


def test_srun_two_emulated_nodes_tf_allreduce(apptainer_bin, tf_sif, slurm_two_nodes):
    done, record = benchrun_apptainer(apptainer_bin, "--image", tf_sif, "--launcher", "srun",
                                      "-n", "2", "--launcher-arg=--nodes=2", "--", *allreduce(),
                                      environ={**slurm_two_nodes["env"], "DLBENCH_COORDINATOR": "127.0.0.1"})
    check_ok(done, record)
    assert record["world"]["nodes"] == 2 and {r["host"] for r in record["ranks"]} == {"node1", "node2"}


def srun_ddp(bin_dir, sif, cluster, *extra):
    """DDP from the SIF Singularity.def made, given by path."""
    done, record = benchrun_apptainer(bin_dir, "--image", sif, "--launcher", "srun", "-n", "2", *extra, "--", *DDP,
                                      environ={**cluster["env"], "DLBENCH_COORDINATOR": "127.0.0.1"})
    check_ok(done, record)
    assert len(record["ranks"]) == 2 and record["replicas"]["in_sync"] and record["config"]["framework"] == "torch"
    return record


def test_srun_one_node_torch_ddp(apptainer_bin, torch_sif, slurm_single):
    assert srun_ddp(apptainer_bin, torch_sif, slurm_single)["world"]["nodes"] == 1


def test_srun_two_emulated_nodes_torch_ddp(apptainer_bin, torch_sif, slurm_two_nodes):
    record = srun_ddp(apptainer_bin, torch_sif, slurm_two_nodes, "--launcher-arg=--nodes=2")
    assert record["world"]["nodes"] == 2 and {r["host"] for r in record["ranks"]} == {"node1", "node2"}


def test_horovod_mpich_image_under_the_hosts_hydra(apptainer_bin, horovod_images, mpi_flavours):
    """Singularity's documented MPI model: the host's MPICH (Hydra) starts one `apptainer exec` per rank,
    the image's MPICH (same ABI) joins through the PMI variables the host's launcher sets."""
    if shutil.which(HYDRA) is None:
        pytest.skip(f"{HYDRA} (Debian mpich) is not installed")
    image = horovod_images["mpich"]
    image_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", image], capture_output=True,
                              text=True).stdout.strip().removeprefix("sha256:")
    if not (SIF_DIR / f"{image_id[:16]}.sif").is_file():
        singularity.remove_stale(SIF_DIR)  # what the runtime frees before a build, so that the check counts it
        try:  # its SIF takes ~3x the 8.4 GB image while it is built: a full disk here would fail every later test
            singularity.check_room(image, SIF_DIR)
        except UsageError as error:
            skip_loudly(f"HOROVOD UNDER APPTAINER NOT RUN: {error}")
    apptainer.sif(image, apptainer_bin)
    done, record = benchrun_apptainer(apptainer_bin, "--image", image, "--launcher", "mpich", "-n", "2", "--",
                                      *TINY_TF, "--strategy", "horovod", timeout=1200)
    check_ok(done, record)
    assert record["world"]["launcher"] == "mpich" and record["world"]["strategy"] == "horovod"
    assert len(record["ranks"]) == 2 and record["replicas"]["in_sync"]


# ---- stops ---------------------------------------------------------------------------------------

LONG = [*TINY_TF[:-4], "--num-batches", "100000"]


def test_timeout_leaves_nothing(apptainer_bin, tf_sif):
    t0 = time.monotonic()
    done, record = benchrun_apptainer(apptainer_bin, "--image", tf_sif, "--timeout", "15", "--", *LONG)
    assert done.returncode == 4 and record["status"] == "timeout", done.stderr[-2000:]
    assert time.monotonic() - t0 < 150 and not leftovers()


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_stop_keeps_the_record_and_leaves_nothing(apptainer_bin, tf_sif, stop):
    started = Started([sys.executable, "-m", "runners", "run", "--runtime", "apptainer", "--image", tf_sif, "--",
                       *LONG], env=apptainer.env(apptainer_bin))
    started.wait_for("bench: building", timeout=180)
    assert leftovers(), "bench is up but no Apptainer process or mount is seen"
    started.proc.send_signal(stop)
    out, err = started.communicate(timeout=180)
    assert started.proc.returncode == 130 and last_json_line(out)["status"] == "interrupted", err[-2000:]
    deadline = time.monotonic() + 10  # squashfuse unmounts as the starter ends
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not leftovers()


# ---- bad input: one line, exit 2, nothing left -----------------------------------------------------

def refused(bin_dir, tmp_path, image, message, *bench_args):
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    done, _ = benchrun_apptainer(bin_dir, "--image", image, "--results", str(results), "--",
                                 *(bench_args or TINY_TF))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == "" and list(results.iterdir()) == []


def test_bad_sifs_are_one_line(apptainer_bin, tf_sif, tmp_path):
    refused(apptainer_bin, tmp_path, str(tmp_path / "missing.sif"), f"image file {tmp_path}/missing.sif does not exist")
    fake = tmp_path / "fake.sif"
    fake.write_bytes(b"not a SIF\n" * 10)
    refused(apptainer_bin, tmp_path, str(fake), "is not a SIF")
    other = [*TINY_TF[2:], "--framework", "torch"]
    refused(apptainer_bin, tmp_path, tf_sif, "holds tensorflow (io.dlbench.framework), not --framework torch", *other)


def test_unreadable_sif_is_one_line_for_its_user(apptainer_bin, tf_sif):
    venv = unprivileged_user()
    secret = UNPRIVILEGED_HOME / "root-only.sif"
    shutil.copyfile(apptainer.INSTALL, secret)  # any content: it is refused before it is read
    secret.chmod(0o600)
    try:
        with apptainer.fuse_for("nobody"):  # (for this user the /dev/fuse check comes first)
            done = as_nobody(f'eval "$({apptainer.INSTALL})" && {venv}/bin/python -m runners run --runtime apptainer '
                             f"--image {secret} -- --model alexnet", timeout=120)
        assert done.returncode == 2 and done.stderr.splitlines()[-1] == \
            f"benchrun: error: image file {secret} is not readable (Permission denied)", done.stderr
    finally:
        secret.unlink()


def test_apptainer_missing_is_one_line(tmp_path):
    """The absence made here (a PATH of an empty directory), whatever this machine has installed."""
    done = subprocess.run([sys.executable, "-m", "runners", "run", "--runtime", "apptainer", "--", "--model", "alexnet"],
                          cwd=ROOT, env=python_env({"PATH": str(tmp_path)}), capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "runtime 'apptainer' needs 'apptainer', which is not on PATH" in done.stderr
    assert "scripts/install-apptainer.sh" in done.stderr


# ---- the overhead job, as a site submits it -------------------------------------------------------

def test_overhead_job_under_slurm(apptainer_bin, tf_sif, slurm_single, tmp_path):
    """examples/runtime-overhead/overhead.sbatch through sbatch, tiny (2 rounds of local and apptainer,
    ResNet-50 TF, 2 timed steps): records of both runtimes, the report's runtime table, and the job's log
    ending with the verdict table."""
    env = {**apptainer.env(apptainer_bin), **slurm_single["env"], "RUNTIMES": "local,apptainer", "ROUNDS": "2",
           "MODELS": "resnet50", "FRAMEWORKS": "tensorflow", "NUM_BATCHES": "2", "PYTHON": sys.executable, "TF_IMAGE": tf_sif}
    env["PATH"] = f"{apptainer_bin}:{slurm_single['env'].get('PATH', os.environ['PATH'])}"
    out, log = tmp_path / "overhead", tmp_path / "job.out"
    job = subprocess.run(["sbatch", "--parsable", f"--output={log}", f"--chdir={ROOT}", f"--export=ALL,OUT={out}",
                          str(ROOT / "examples/runtime-overhead/overhead.sbatch")],
                         env=env, capture_output=True, text=True, timeout=60)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 900
    while True:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=env, capture_output=True, text=True).stdout
        state = shown.split("JobState=", 1)[1].split()[0] if "JobState=" in shown else "GONE"
        if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            break
        assert time.monotonic() < deadline, f"job {job_id} still {state}"
        time.sleep(1)
    text = log.read_text() if log.exists() else ""
    assert state == "COMPLETED", f"job {job_id}: {state}\n{text[-3000:]}"
    records = [json.loads(line) for line in (out / "resnet50-tensorflow" / "records.jsonl").read_text().splitlines()]
    assert sorted(r["provenance"]["requested_runtime"] for r in records) == ["apptainer", "apptainer", "local", "local"]
    assert all(r["status"] == "ok" for r in records)
    report = (out / "report" / "report.md").read_text()
    assert "| apptainer | 2 |" in report and "| local | 2 |" in report
    # the job's log ends with the verdict table: Apptainer against the bare host, ratio, interval, verdict
    last = text.split("overhead.sbatch: report in", 1)[1]
    [row] = [line for line in last.splitlines() if line.startswith("| apptainer | local |")
             and " | to " not in line]  # the throughput verdict, not the launch rows (| to bench up |, ...)
    assert "paired by round, 2 rounds" in row and ("equivalent" in row or "slower" in row or "faster" in row
                                                   or "inconclusive" in row), row
    assert [r["comparison"]["round"] for r in records if r["provenance"]["requested_runtime"] == "local"] == [1, 2]
    assert not leftovers()
