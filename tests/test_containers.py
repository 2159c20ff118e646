"""The Docker images, Compose services and container scripts, for real.

Tests that need Docker start the daemon through containers/dockerd.sh (the same
helper ci.sh uses) and build the images through `make -f containers/images.mk`
(layer cache makes that seconds when nothing changed). They skip only when
Docker cannot exist here (no daemon, and no root/apt to install one), and say
so in the skip reason.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest
from containers_recipes import DOCKERFILES, ROOT, parse_dockerfile

from infra.docker import derived_image, one_file_image
from infra.helpers import run
from infra.images import BASE_IMAGE, IMAGES, VERSION

C = ROOT / "containers"
SERVICES = {"torch": "torch-bench", "tensorflow": "tf-bench"}
SMOKE = ["--model", "resnet50", "--image-size", "64", "--batch-size", "2",
         "--num-warmup-batches", "1", "--num-batches", "2", "--json"]


def one_line_error(p: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2 and a single stderr line naming the problem."""
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2, f"exit {p.returncode}, stderr:\n{p.stderr}"
    assert len(lines) == 1, f"expected one line, got:\n{p.stderr}"
    for n in needles:
        assert n in lines[0], f"{n!r} not in {lines[0]!r}"
    return lines[0]


def compose_cmd() -> list[str] | None:
    if shutil.which("docker") and run(["docker", "compose", "version"]).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


def compose_v2() -> list[str]:
    """`docker compose` (v2), which the docker fixture installs (scripts/install-compose-v2.sh): ask after it ran."""
    p = run(["docker", "compose", "version"])
    assert p.returncode == 0 and re.search(r"version v?2\.", p.stdout), f"no Compose v2 after the docker fixture: {p.stderr}"
    return ["docker", "compose"]


@pytest.fixture(scope="session")
def images(dlbench_images):
    """Built once per run by tests/infra/images.py (offline from the wheelhouse, like ci.sh)."""
    return dlbench_images


# ---- no Docker needed ----------------------------------------------------------

def shared_stage(text: str) -> str:
    m = re.search(r"^FROM \$\{BASE_IMAGE\} AS core$.*?^# ---- end of shared stage$", text, re.M | re.S)
    assert m, "shared stage markers not found"
    return m.group(0)


def test_shared_stage_is_identical_in_both_dockerfiles():
    # Identical text -> identical BuildKit cache keys -> one copy of these layers on disk.
    assert shared_stage(DOCKERFILES["torch"].read_text()) == shared_stage(DOCKERFILES["tensorflow"].read_text())


def late_layer(text: str) -> str:
    m = re.search(r"^# ---- late layer:.*?^# ---- end of late layer$", text, re.M | re.S)
    assert m, "late layer markers not found"
    return m.group(0)


def test_late_layer_is_identical_and_below_the_dependency_layers():
    """One late layer in all three Dockerfiles, in their final stage, before the source: changing
    containers/late/ rebuilds neither a framework layer nor Horovod."""
    for path in (*DOCKERFILES.values(), C / "horovod/Dockerfile"):
        text = path.read_text()
        late = text.index(late_layer(text))
        assert late_layer(text) == late_layer(DOCKERFILES["torch"].read_text()), path
        assert text.rindex("\nFROM ", 0, late) == text.rindex("\nFROM "), f"{path}: not in the final stage"
        assert late < text.index("COPY benchmarks/"), path


def test_version_label_defaults_match_pyproject_pins():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = {re.split(r"==", r)[0]: r.split("==")[1] for r in extras["torch"] + extras["tf"]}
    torch_args = parse_dockerfile(DOCKERFILES["torch"].read_text())["final"].args
    tf_args = parse_dockerfile(DOCKERFILES["tensorflow"].read_text())["final"].args
    assert torch_args["TORCH_VERSION"] == pins["torch"]
    assert torch_args["TORCHVISION_VERSION"] == pins["torchvision"]
    assert tf_args["TENSORFLOW_VERSION"] == pins["tensorflow-cpu"]


def test_dockerfiles_promise_entrypoint_user_and_env():
    for fw, path in DOCKERFILES.items():
        final = parse_dockerfile(path.read_text())["final"]
        assert final.entrypoint == ["bench"]
        assert final.user == "bench"
        assert final.env["BENCH_FRAMEWORK"] == fw
        assert final.env["BENCH_IMAGE"] == final.args["IMAGE_NAME"]
        # Enroot/Pyxis/CE GPU hooks act only on these; Enroot's dockerd:// import needs an ENTRYPOINT/CMD.
        assert final.env["NVIDIA_VISIBLE_DEVICES"] == "all"
        assert final.env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
        assert "/etc/profile.d/dlbench-venv.sh" in path.read_text()


def test_pydeps_lists_pyproject_groups_and_rejects_unknown():
    p = run([sys.executable, C / "image/pydeps.py", ROOT / "pyproject.toml", "core", "torch"])
    assert p.returncode == 0 and "torch==2.14.1" in p.stdout.split("\n") and "numpy>=1.26" in p.stdout
    p = run([sys.executable, C / "image/pydeps.py", ROOT / "pyproject.toml", "tf",
             "--replace", "tensorflow-cpu=tensorflow[and-cuda]==2.21.0"])
    assert p.stdout.split() == ["tensorflow[and-cuda]==2.21.0"]
    one_line_error(run([sys.executable, C / "image/pydeps.py", ROOT / "pyproject.toml", "jax"]), "'jax'", "torch")


def test_build_rejects_unknown_framework():
    one_line_error(run([C / "build.sh", "jax"]), "unknown framework 'jax'", "tf, torch")


def test_dockerd_helper_rejects_unknown_option():
    one_line_error(run([C / "dockerd.sh", "--bogus"]), "'--bogus'", "--install")


def test_daemon_not_running_is_one_line(tmp_path):
    down = {"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    one_line_error(run([C / "build.sh", "tf"], env=down), "Docker daemon not reachable", "dockerd.sh")
    if compose_cmd():
        one_line_error(run([C / "compose-run.sh", "tf-bench"], env=down), "Docker daemon not reachable")
    # Through make: our line, then only make's own "Error 2" trailer.
    p = run(["make", "-s", "-f", C / "images.mk", "image-torch"], env=down)
    assert p.returncode == 2
    ours = [ln for ln in p.stderr.splitlines() if "dlbench-containers: error" in ln]
    assert len(ours) == 1 and "Docker daemon not reachable" in ours[0]
    assert len(p.stderr.strip().splitlines()) <= 2, p.stderr


def test_unknown_compose_service_is_one_line(docker):
    compose_v2()  # compose-run.sh picks v2 when it is there
    one_line_error(run([C / "compose-run.sh", "jax-bench", "--help"]),
                   "unknown compose service 'jax-bench'", "tf-bench, torch-bench")
    one_line_error(run([C / "compose-run.sh"]), "missing service name", "tf-bench, torch-bench")


# ---- Docker --------------------------------------------------------------------

@pytest.mark.parametrize("version", ["v2", "v1"])
def test_compose_files_are_valid_and_cpu_by_default(docker, version):
    yaml = pytest.importorskip("yaml")
    compose = compose_v2() if version == "v2" else ["docker-compose"]
    if version == "v1" and not shutil.which("docker-compose"):
        pytest.skip("bookworm's docker-compose (v1) is not installed: only v2 checked")
    p = run([*compose, "config"])
    assert p.returncode == 0, p.stderr
    cfg = yaml.safe_load(p.stdout)
    assert set(cfg["services"]) == {"tf-bench", "torch-bench", "horovod-bench", "horovod-mpich-bench"}
    for name, svc in cfg["services"].items():
        assert svc["ipc"] == "host" and svc["network_mode"] == "host" and svc["shm_size"]
        vols = [v if isinstance(v, str) else f"{v['source']}:{v['target']}{':ro' if v.get('read_only') else ''}"
                for v in svc["volumes"]]
        assert any(v.endswith(":/data:ro") for v in vols), vols
        assert any(re.search(r":/results(:rw)?$", v) for v in vols), vols
        assert "deploy" not in svc, f"{name} reserves devices without the GPU override"
        if name.startswith("horovod"):  # built by `make images-horovod` (FROM the torch image)
            assert "build" not in svc and svc["image"].startswith("dlbench-horovod-")
        else:
            assert svc["build"]["dockerfile"] in ("Dockerfile.tf", "Dockerfile.torch")
    p = run([*compose, "-f", "docker-compose.yml", "-f", "docker-compose.gpu.yml", "config"])
    assert p.returncode == 0, p.stderr
    gpu = yaml.safe_load(p.stdout)["services"]
    for svc in (gpu["tf-bench"], gpu["torch-bench"]):
        assert svc["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


def test_missing_base_image_is_one_line(docker):
    # MIN_FREE_GB=0: the free-space check comes first and would answer instead on a full disk (CI: 7 GB free).
    one_line_error(run([C / "build.sh", "tf"], env={"BASE_IMAGE": "dlbench-no-such-base:0", "MIN_FREE_GB": "0"}),
                   "'dlbench-no-such-base:0'", "dlbench-base:bookworm")


def test_rebuilds_leave_no_image_of_ours_dangling(docker):
    """prune_stale_images (build.sh's last step) removes the earlier ids of our images and of the
    dependency stage (the dlbench base's labels only), and nobody else's dangling image."""
    tag = f"dlbench-prune-test:{uuid.uuid4().hex[:8]}"
    ours = [derived_image(tag, BASE_IMAGE, f"LABEL io.dlbench.framework=test-{n}") for n in (1, 2)]
    ours.append(derived_image(tag, BASE_IMAGE, "LABEL prune-test=stage"))  # the base's labels and one more
    other = one_file_image(tag, C / "lib.sh")  # no labels: not ours
    kept = derived_image(tag, BASE_IMAGE, "LABEL io.dlbench.framework=test-kept")  # the tag's image now
    try:
        p = run(["bash", "-c", f". {C}/lib.sh && prune_stale_images"])
        assert p.returncode == 0, p.stderr
        exists = {image: run(["docker", "image", "inspect", image]).returncode == 0 for image in [*ours, other, kept]}
        assert exists == {**dict.fromkeys(ours, False), other: True, kept: True}
    finally:
        run(["docker", "rmi", "-f", tag, *ours, other])


def test_too_little_disk_is_one_line(docker):
    one_line_error(run([C / "build.sh", "torch"], env={"MIN_FREE_GB": "100000"}), "GB free", "MIN_FREE_GB")


def test_missing_image_for_compose_service_is_one_line(docker):
    compose_v2()
    one_line_error(run([C / "compose-run.sh", "tf-bench", "--help"], env={"DLBENCH_TAG": "no-such-tag"}),
                   "'dlbench-tensorflow:no-such-tag'", "make image-tf")


@pytest.mark.slow
@pytest.mark.parametrize("fw", sorted(IMAGES))
def test_help_version_user_and_env(images, fw):
    image = images[fw]
    p = run(["docker", "run", "--rm", image, "--help"])
    assert p.returncode == 0 and "--model" in p.stdout, p.stderr
    p = run(["docker", "run", "--rm", image, "--version"])
    assert p.returncode == 0 and VERSION in p.stdout, p.stdout + p.stderr
    p = run(["docker", "run", "--rm", "--entrypoint", "sh", image, "-c",
             'id -u; echo "$BENCH_FRAMEWORK $BENCH_IMAGE"; test ! -e /run/secrets/ca && echo nosecret;'
             ' echo "$NVIDIA_VISIBLE_DEVICES $NVIDIA_DRIVER_CAPABILITIES"'])
    assert p.stdout.split() == ["1000", fw, image, "nosecret", "all", "compute,utility"], p.stdout + p.stderr
    # A login shell (Enroot/Pyxis default) runs Debian's /etc/profile, which resets PATH: bench must stay first.
    p = run(["docker", "run", "--rm", "--entrypoint", "sh", image, "-lc", "command -v bench"])
    assert p.stdout.strip() == "/opt/venv/bin/bench", p.stdout + p.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fw", sorted(IMAGES))
def test_labels_match_installed_versions(images, fw):
    labels = json.loads(run(["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", images[fw]]).stdout)
    assert labels["io.dlbench.framework"] == fw
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.base.name"] == BASE_IMAGE
    dists = {k.split(".")[2]: v for k, v in labels.items() if re.fullmatch(r"io\.dlbench\.\w+\.version", k)}
    assert dists, labels
    code = "import importlib.metadata as m, json, sys; print(json.dumps({d: m.version(d) for d in sys.argv[1:]}))"
    names = {"tensorflow": "tensorflow-cpu"}
    p = run(["docker", "run", "--rm", "--entrypoint", "python", images[fw], "-c", code,
             *[names.get(d, d) for d in dists]])
    installed = json.loads(p.stdout)
    for d, v in dists.items():
        assert installed[names.get(d, d)].split("+")[0] == v


@pytest.mark.slow
@pytest.mark.parametrize("fw", sorted(IMAGES))
def test_late_layer_brings_mlperf_logging_and_fashion_mnist(images, fw):
    pin = re.search(r"^mlperf-logging==(\S+)$", (C / "late/requirements.txt").read_text(), re.M).group(1)
    code = ("import importlib.metadata as m; from benchmarks.data.labelled import check_fashion_mnist; "
            "from benchmarks.settings.options import FASHION_MNIST_DIR; check_fashion_mnist(FASHION_MNIST_DIR); "
            "print(m.version('mlperf-logging'))")
    p = run(["docker", "run", "--rm", "--entrypoint", "python", images[fw], "-c", code])
    assert p.returncode == 0 and p.stdout.strip() == pin, p.stdout + p.stderr


@pytest.mark.slow
def test_images_share_base_and_core_layers(images):
    layers = {fw: json.loads(run(["docker", "image", "inspect", "-f", "{{json .RootFS.Layers}}", img]).stdout)
              for fw, img in images.items()}
    shared = 0
    for a, b in zip(layers["torch"], layers["tensorflow"]):
        if a != b:
            break
        shared += 1
    # base + COPY scripts + setup-base + COPY pyproject + core deps
    assert shared >= 5, layers


@pytest.mark.slow
@pytest.mark.parametrize("fw", sorted(IMAGES))
def test_compose_run_gives_a_docker_record(images, fw, tmp_path):
    """The README's literal command, `docker compose run --rm tf-bench --model resnet50 ...`, with v2."""
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)  # the image runs as uid 1000
    left = ["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.service={SERVICES[fw]}"]
    p = run([*compose_v2(), "run", "--rm", SERVICES[fw], *SMOKE, "--output", "/results/run.jsonl"],
            env={"BENCH_RESULTS_DIR": str(results), "DLBENCH_TAG": VERSION}, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert run(left).stdout.split() == []  # --rm: the container is gone
    rec = json.loads(p.stdout.strip().splitlines()[-1])
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(rec, json.loads((ROOT / "benchmarks/schema/result-1.json").read_text()))
    assert rec["status"] == "ok", rec.get("error")
    assert rec["config"]["framework"] == fw
    assert rec["provenance"]["container_runtime"] == "docker"
    assert rec["provenance"]["image"] == IMAGES[fw]
    assert rec["throughput"]["images_per_sec"] > 0
    saved = [json.loads(ln) for ln in (results / "run.jsonl").read_text().splitlines()]
    assert saved[-1]["run_id"] == rec["run_id"]
    # check_record.py (make compose-smoke) must agree, and must reject a bad record.
    ok = run([sys.executable, C / "check_record.py", fw], input=p.stdout)
    assert ok.returncode == 0, ok.stderr
    bad = dict(rec, provenance={**rec["provenance"], "container_runtime": "none"})
    p = run([sys.executable, C / "check_record.py", fw], input=json.dumps(bad))
    assert p.returncode == 1 and "container_runtime" in p.stderr


@pytest.mark.slow
def test_ca_secret_is_used_but_not_left_in_the_image(docker, tmp_path):
    """Build the shared stage with an extra CA as build secret: the build sees
    it, the image (every layer, via docker save) does not contain it."""
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed")
    marker = f"dlbench-test-ca-{uuid.uuid4().hex[:12]}"
    key, cert = tmp_path / "ca.key", tmp_path / "ca.pem"
    p = run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", f"/CN={marker}", "-keyout", key, "-out", cert])
    assert p.returncode == 0, p.stderr
    bundle = tmp_path / "bundle.pem"
    host = Path("/etc/ssl/certs/ca-certificates.crt")
    bundle.write_text((host.read_text() if host.exists() else "") + cert.read_text())
    body = "".join(cert.read_text().splitlines()[1:-1])[40:120]  # a unique run of the PEM body
    image = f"dlbench-test-ca:{uuid.uuid4().hex[:8]}"
    log = tmp_path / "build.log"
    subprocess.run(["make", "-f", str(C / "images.mk"), "base-image"], cwd=ROOT, check=True,
                   capture_output=True, timeout=900)
    try:
        p = run([C / "build.sh", "torch", "--target", "core", "--no-cache"], timeout=900,
                env={"BASE_IMAGE": BASE_IMAGE, "CA_CERT": str(bundle), "IMAGE": image, "BUILD_LOG": str(log)})
        assert p.returncode == 0, p.stderr
        assert f"build secret 'ca' present ({bundle.stat().st_size} bytes)" in log.read_text()
        found = scan_saved_image(image, [body.encode(), marker.encode()])
        assert not found, f"CA secret content found in image layers: {found}"
    finally:
        run(["docker", "rmi", "-f", image])


def scan_saved_image(image: str, needles: list[bytes]) -> list[bytes]:
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
    keep = max(len(n) for n in needles)
    tail, found = b"", set()
    while chunk := save.stdout.read(1 << 20):
        buf = tail + chunk
        found.update(n for n in needles if n in buf)
        tail = buf[-keep:]
    assert save.wait() == 0
    return sorted(found)
