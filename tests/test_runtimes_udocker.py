"""udocker, the "no admin installed anything" runtime: exact command lines, and real runs (proot and
runc modes, alone and under srun on the local Slurm) with udocker installed by
scripts/install-udocker.sh (PyPI udocker + Debian proot/runc, cached outside the clone)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_runtimes import dirs  # noqa: F401 (a fixture)
from test_runtimes_real import TINY_TF, public_dataset, timeout_and_sigint_leave_no_container, validate_in_image  # noqa: F401 - fixtures, requested by name

from infra.cache import CACHE, inputs_key, once
from infra.helpers import ROOT, benchrun, benchrun_record, last_json_line, run
from infra.unprivileged import UNPRIVILEGED_HOME, as_nobody, unprivileged_user
from runners import runtimes
from runners.runtimes import udocker
from runners.runtimes.base import Mount
from runners.runtimes.container import ContainerSpec

INSTALL = ROOT / "scripts" / "install-udocker.sh"
REPOSITORY = CACHE / "udocker-repo"  # UDOCKER_DIR of the tests: loaded images survive between runs
TF_IMAGE = "dlbench-tensorflow:latest"


def test_udocker_argv(dirs, monkeypatch):
    results, data = dirs
    monkeypatch.setenv("RANK", "1")
    spec = ContainerSpec("udocker", "dlbench-torch:latest", name="dlbench-abc",
                         mounts=[Mount(str(results), "/results", readonly=False), Mount(str(data), "/data")],
                         workdir="/results", env={"DLBENCH_X": "1"})
    cmd, name = spec.command(runtimes.get(spec.runtime), ["bench", "--model", "alexnet"], {"RANK": "1"})
    root = ["--allow-root"] if os.geteuid() == 0 else []
    assert name == f"dlbench-abc-r1-{os.getpid()}"
    assert [os.path.basename(cmd[0]), *cmd[1:]] == [
        "udocker", *root, "run", f"--name={name}", "--pull=never", "--nobanner", "--user=root",
        "-e", "RANK=1", "-e", "DLBENCH_X=1", "-v", f"{results}:/results", "-v", f"{data}:/data", "-w", "/results",
        "--entrypoint=bench", "dlbench-torch:latest", "--model", "alexnet"]
    assert runtimes.get("udocker").host_env() == {"UDOCKER_DEFAULT_EXECUTION_MODE": "P1"}
    assert runtimes.get("udocker-runc").host_env() == {"UDOCKER_DEFAULT_EXECUTION_MODE": "R1"}


def test_udocker_runc_exit_code_is_the_records():
    # udocker 1.3.17's R1 mode returns 1 whatever the container's exit code; proot mode keeps it.
    runc, proot = (runtimes.get(name).client(None) for name in ("udocker-runc", "udocker"))
    assert runc.exit_code(1, {"status": "ok"}) == 0 and runc.exit_code(1, {"status": "timeout"}) == 4
    assert runc.exit_code(1, None) == 1 and proot.exit_code(1, {"status": "ok"}) == 1


def test_udocker_has_no_gpu_option(dirs):
    with pytest.raises(Exception, match="has no GPU option"):
        runtimes.get("udocker").command("img:1", ["bench"], gpus=True)


@pytest.mark.parametrize("runtime", ["udocker", "udocker-runc"])
def test_missing_udocker_is_one_line_exit_2(tmp_path, runtime):
    out = benchrun("run", "--runtime", runtime, "--", "--model", "resnet50", env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert out.returncode == 2 and out.stderr == (f"benchrun: error: runtime {runtime!r} needs 'udocker', which is not on "
                                                  f"PATH (eval \"$(scripts/install-udocker.sh)\")\n")


# ---- real udocker -----------------------------------------------------------------------

def installed_udocker() -> dict:
    """udocker on PATH (installed once per content of the install script) and the tests' repository."""
    def build() -> str:
        out = run([str(INSTALL)], timeout=600)
        assert out.returncode == 0, f"install-udocker.sh failed: {out.stderr[-2000:]}"
        return re.fullmatch(r'export PATH="(.+):\$PATH"', out.stdout.strip()).group(1)

    bindir = once("udocker", inputs_key(["scripts/install-udocker.sh"]), build,
                  lambda text: Path(text, "udocker").is_file()).strip()
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "UDOCKER_DIR": str(REPOSITORY)}


@pytest.fixture(scope="module")
def udocker_env():
    if os.geteuid() != 0 and subprocess.run(["dpkg-query", "-W", "proot"], capture_output=True).returncode != 0:
        pytest.skip("UDOCKER TESTS SKIPPED: Debian's proot is missing and only root can install it")
    return installed_udocker()


def dlbench_containers(env) -> list[str]:
    """Containers of dlbench images, named or not (a rank's container whose name was never set is ~1.5 GB)."""
    out = run(["udocker", *udocker.UdockerRuntime().root_option(), "ps"], env=env).stdout
    return [line.split()[0] for line in out.splitlines()[1:] if " dlbench-" in line]


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["udocker", "udocker-runc"])
def test_udocker_real_run(runtime, udocker_env, dlbench_images, public_dataset, tmp_path):
    before = sorted(p.name for p in public_dataset.rglob("*"))
    out, record = benchrun_record("run", "--runtime", runtime, "--data-dir", str(public_dataset), "--results", str(tmp_path),
                                "--", *TINY_TF, env=udocker_env)
    assert out.returncode == 0, out.stderr[-3000:]
    validate_in_image(record)
    assert record["status"] == "ok", record.get("error")
    assert record["provenance"]["requested_runtime"] == runtime and record["provenance"]["image"].startswith("dlbench-")
    assert record["provenance"]["container_runtime"] == "udocker"  # from the variables udocker sets
    assert record["config"]["data_dir"] == "/data" and record["config"]["data"] == "real"
    assert json.loads((tmp_path / "records.jsonl").read_text())["run_id"] == record["run_id"]
    assert sorted(p.name for p in public_dataset.rglob("*")) == before
    assert dlbench_containers(udocker_env) == []


@pytest.mark.slow
def test_udocker_timeout_and_sigint_leave_no_container(udocker_env, dlbench_images):
    timeout_and_sigint_leave_no_container("udocker", lambda: dlbench_containers(udocker_env), udocker_env, start_s=120)


@pytest.mark.slow
def test_udocker_under_srun_two_ranks(udocker_env, dlbench_images, slurm_single):
    """Two ranks, each in a container of its own: TensorFlow all-reduce on the 1.9 GB TensorFlow image
    (two containers of the 6 GB torch image would unpack 12 GB for one test)."""
    env = {**slurm_single["env"], **udocker_env, "DLBENCH_COORDINATOR": "127.0.0.1"}
    out, record = benchrun_record("run", "--runtime", "udocker", "--image", TF_IMAGE, "--launcher", "srun", "-n", "2",
                                "--", *TINY_TF, "--strategy", "allreduce", env=env, timeout=1500)
    assert out.returncode == 0, out.stderr[-4000:]
    assert record["status"] == "ok" and len(record["ranks"]) == 2 and record["replicas"]["in_sync"]
    assert record["world"]["launcher"] == "srun" and record["provenance"]["requested_runtime"] == "udocker"
    assert dlbench_containers(udocker_env) == []


@pytest.mark.slow
def test_udocker_unprivileged_user_from_a_tarball(udocker_env, dlbench_images):
    """The "no admin" case for real: a user with no Docker access, its own udocker (install-udocker.sh
    as that user), benchrun from a venv of its own, the image as a `docker save` tarball."""
    venv = unprivileged_user()
    image_id = run(["docker", "image", "inspect", "-f", "{{.Id}}", TF_IMAGE]).stdout.strip()
    tar = UNPRIVILEGED_HOME / f"dlbench-tensorflow-{image_id.split(':')[-1][:12]}.tar"
    if not tar.is_file():
        for old in UNPRIVILEGED_HOME.glob("dlbench-tensorflow-*.tar*"):  # a killed run's .partial too
            old.unlink()
        assert run(["docker", "save", "-o", f"{tar}.partial", TF_IMAGE], timeout=600).returncode == 0
        os.replace(f"{tar}.partial", tar)
        tar.chmod(0o644)
    results = UNPRIVILEGED_HOME / f"results-{os.getpid()}"
    try:
        out = as_nobody(f'eval "$({INSTALL})" && mkdir -p {results} && UDOCKER_DIR={UNPRIVILEGED_HOME}/udocker '
                        f'{venv}/bin/python -m runners run --runtime udocker --image {tar} --results {results} -- '
                        + " ".join(TINY_TF))
        assert out.returncode == 0, out.stderr[-3000:]
        record = last_json_line(out.stdout)
        validate_in_image(record)
        assert record["status"] == "ok" and record["provenance"]["requested_runtime"] == "udocker"
        assert (results / "records.jsonl").stat().st_uid == 65534  # written as the user, not root
        left = as_nobody(f'eval "$({INSTALL})" && UDOCKER_DIR={UNPRIVILEGED_HOME}/udocker udocker ps').stdout
        assert "dlbench-" not in left
    finally:
        shutil.rmtree(results, ignore_errors=True)


@pytest.mark.slow
def test_udocker_bad_image_is_one_line_and_leaves_nothing(udocker_env, tmp_path):
    store = tmp_path / "store"
    env = {**udocker_env, udocker.STORE_ENV: str(store)}
    images_before = run(["udocker", *udocker.UdockerRuntime().root_option(), "images"], env=env).stdout
    missing = benchrun("run", "--runtime", "udocker", "--image", "dlbench-no-such-image:0", "--", "--model", "alexnet", env=env)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert "image 'dlbench-no-such-image:0' not found in the local Docker engine" in missing.stderr
    not_an_image = tmp_path / "broken.tar"
    not_an_image.write_bytes(b"this is not a docker save tarball\n" * 100)
    broken = benchrun("run", "--runtime", "udocker", "--image", str(not_an_image), "--", "--model", "alexnet", env=env)
    assert broken.returncode == 2 and broken.stderr.count("\n") == 1, broken.stderr
    assert broken.stderr.startswith(f"benchrun: error: udocker load -i {not_an_image} failed")
    assert run(["udocker", *udocker.UdockerRuntime().root_option(), "images"], env=env).stdout == images_before
    assert not store.exists() or list(store.iterdir()) == []
    assert dlbench_containers(env) == []
