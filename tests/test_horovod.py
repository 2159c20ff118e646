"""The Horovod images, for real: dlbench-horovod-openmpi and dlbench-horovod-mpich.

The session fixture (tests/infra/images.py) builds both once per run through
`make images-horovod`, and not at all when their inputs are unchanged (BuildKit
layer cache otherwise: seconds when little changed, ~10 min cold). Every run is two ranks of
a tiny AlexNet inside one container (`--network=host --ipc=host`), started
by the project's launcher inside the image (`benchrun launch`), and its record
must be a complete, schema-valid Horovod record. Tests skip only when Docker
cannot exist here (no daemon, and no root/apt to install one).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid

import pytest

from benchmarks.core.errors import EXIT_INTERRUPTED
from infra.helpers import Started, hanging_shutdown, run, validate_record
from infra.images import VERSION

HOROVOD_VERSION = "0.28.1"
TINY = ["--strategy", "horovod", "--model", "alexnet", "--image-size", "64", "--batch-size", "2",
        "--num-warmup-batches", "1", "--num-batches", "2", "--num-threads", "1", "--json"]
RUN_TIMEOUT = 300
DURATIONS: dict[str, float] = {}

pytestmark = pytest.mark.slow


def in_image(image: str, entrypoint: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run(["docker", "run", "--rm", "--network=host", "--ipc=host", "--entrypoint", entrypoint, image, *args],
               timeout=timeout)


def records(stdout: str) -> list[dict]:
    """JSON records on stdout; horovodrun tags each rank's output with `[R]<stdout>:`. Under --mpi,
    Open MPI's --tag-output tags every chunk it forwards, so a record longer than its buffer carries
    `[1,R]<stdout>:` in the middle too (seen in CI): strip the tags wherever they are."""
    out = []
    for line in stdout.splitlines():
        line = re.sub(r"\[[\d,]+\]<stdout>:", "", line).strip()  # [R] gloo, [1,R] under --mpi
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


# ---- image content -------------------------------------------------------------

@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_labels_env_user_entrypoint(horovod_images, mpi):
    info = json.loads(run(["docker", "image", "inspect", horovod_images[mpi]]).stdout)[0]["Config"]
    labels = info["Labels"]
    assert labels["io.dlbench.mpi"] == mpi
    assert labels["io.dlbench.horovod.version"] == HOROVOD_VERSION
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.title"] == f"dlbench-horovod-{mpi}"
    assert info["Entrypoint"] == ["bench"]
    assert info["User"] == "bench"
    env = dict(e.split("=", 1) for e in info["Env"])
    assert env["BENCH_IMAGE"] == horovod_images[mpi]
    assert env.get("BENCH_FRAMEWORK", "") == ""
    # Installed versions are the labelled ones; no framework default: --framework is required.
    p = in_image(horovod_images[mpi], "python", "-c",
                 "import horovod, torch, tensorflow as tf, os; "
                 "print(horovod.__version__, torch.__version__.split('+')[0], tf.__version__, os.getuid())")
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == [HOROVOD_VERSION, labels["io.dlbench.torch.version"],
                                labels["io.dlbench.tensorflow.version"], "1000"]
    p = in_image(horovod_images[mpi], "bench", "--model", "resnet50")
    assert p.returncode == 2 and "--framework" in p.stderr


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_horovod_built_with_both_frameworks_gloo_and_mpi(horovod_images, mpi):
    p = in_image(horovod_images[mpi], "horovodrun", "--check-build")
    assert p.returncode == 0, p.stderr
    for item in ("TensorFlow", "PyTorch", "MPI", "Gloo"):
        assert re.search(rf"\[X\] {item}\b", p.stdout), f"{item} not built:\n{p.stdout}"


LIBS = "import glob, horovod, os; d = os.path.dirname(horovod.__file__); " \
       "print('\\n'.join(sorted(glob.glob(d + '/*/mpi_lib*.so'))))"


@pytest.mark.parametrize("mpi,want,unwanted", [("openmpi", "libmpi.so.40", "libmpich"),
                                               ("mpich", "libmpich.so.12", "libmpi.so.40")])
def test_horovod_links_the_images_mpi(horovod_images, mpi, want, unwanted):
    libs = in_image(horovod_images[mpi], "python", "-c", LIBS).stdout.split()
    assert len(libs) == 2, libs  # tensorflow/ and torch/
    for lib in libs:
        p = in_image(horovod_images[mpi], "ldd", lib)
        mpi_lines = [line for line in p.stdout.splitlines() if "libmpi" in line]  # TF's own libs load at import
        assert p.returncode == 0 and mpi_lines and not any("not found" in line for line in mpi_lines), p.stdout
        assert want in p.stdout and unwanted not in p.stdout, f"{lib}:\n{p.stdout}"


def test_mpich_image_has_no_open_mpi(horovod_images):
    # Shifter/Sarus MPI hooks replace the MPICH-ABI libmpi with the host's; an
    # Open MPI library next to it would be picked up instead, or clash.
    p = in_image(horovod_images["mpich"], "sh", "-c",
                 "dpkg-query -W -f '${Package}\\n' | grep -i openmpi; "
                 "find / -xdev \\( -name 'libmpi.so*' -o -name 'libopen-pal*' -o -name 'libopen-rte*' "
                 "-o -name 'libmpi_cxx*' -o -name 'orterun' \\) 2>/dev/null; "
                 "readlink -f $(command -v mpirun mpiexec)")
    lines = p.stdout.split()
    leftovers = [ln for ln in lines if "openmpi" in ln.lower() or "libopen-" in ln or "libmpi.so.40" in ln
                 or "orterun" in ln]
    assert not leftovers, f"Open MPI in the MPICH image:\n{p.stdout}"
    assert any("mpich" in ln or "hydra" in ln for ln in lines), f"mpirun/mpiexec are not MPICH's:\n{p.stdout}"
    # ...and the Open MPI image has its own, so the check above is meaningful.
    p = in_image(horovod_images["openmpi"], "sh", "-c", "dpkg-query -W -f '${Package}\\n' | grep -ic openmpi")
    assert int(p.stdout.strip() or 0) > 0


# ---- two-rank runs ---------------------------------------------------------------

RUNS = [  # (image, launcher, extra launcher args, framework, expected world.launcher)
    ("openmpi", "horovodrun", [], "torch", "horovodrun"),
    ("openmpi", "horovodrun", [], "tensorflow", "horovodrun"),
    ("openmpi", "horovodrun", ["--launcher-arg=--mpi"], "torch", "mpirun"),
    ("openmpi", "mpirun", [], "torch", "mpirun"),
    ("openmpi", "mpirun", [], "tensorflow", "mpirun"),
    ("mpich", "mpich", [], "torch", "mpich"),
    ("mpich", "mpich", [], "tensorflow", "mpich"),
]


@pytest.mark.parametrize("mpi,launcher,extra,framework,expected", RUNS,
                         ids=[f"{m}-{la}{'-mpi' if e else ''}-{f}" for m, la, e, f, _ in RUNS])
def test_two_rank_horovod_run(horovod_images, mpi, launcher, extra, framework, expected):
    image = horovod_images[mpi]
    argv = ["launch", "--launcher", launcher, "-n", "2", "--bench-command", "bench", "--timeout", "240", *extra,
            "--", "--framework", framework, *TINY]
    start = time.monotonic()
    p = in_image(image, "benchrun", *argv, timeout=RUN_TIMEOUT)
    DURATIONS[f"{mpi}/{launcher}{extra}/{framework}"] = time.monotonic() - start
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-5000:]}"
    recs = records(p.stdout)
    assert len(recs) == 1, f"expected exactly one record, got {len(recs)}:\n{p.stdout[-3000:]}"
    rec = validate_record(recs[0])
    assert rec["status"] == "ok", rec.get("error")
    world = rec["world"]
    assert world["strategy"] == "horovod"
    assert world["launcher"] == expected
    assert world["workers"] == 2
    assert len(rec["ranks"]) == 2
    assert rec["replicas"]["in_sync"] is True
    assert rec["throughput"]["total_images"] == 8  # 2 ranks x 2 batches x batch 2
    assert rec["provenance"]["image"] == image


def test_mpich_run_keeps_its_record_when_every_shutdown_hangs(horovod_images, tmp_path):
    """Both ranks' MPI_Finalize never returning, as seen under load in CI: Hydra ends the whole job once
    one rank leaves unfinalized, so process 0, which has the record to write, gives up first (injected
    through a sitecustomize on every rank's PYTHONPATH, graces shortened to 10 and 40 s)."""
    (tmp_path / "sitecustomize.py").write_text(hanging_shutdown(10, 40))
    tmp_path.chmod(0o755)  # the image's user reads it (pytest makes it 0700)
    p = run(["docker", "run", "--rm", "--network=host", "--ipc=host", "-v", f"{tmp_path}:/inject:ro",
             "-e", "PYTHONPATH=/inject", "--entrypoint", "benchrun", horovod_images["mpich"], "launch", "--launcher",
             "mpich", "-n", "2", "--bench-command", "bench", "--timeout", "240", "--", "--framework", "torch", *TINY],
            timeout=RUN_TIMEOUT)
    recs = records(p.stdout)
    assert len(recs) == 1, f"exit {p.returncode}\nstderr:\n{p.stderr[-3000:]}"
    assert validate_record(recs[0])["status"] == "ok" and recs[0]["world"]["workers"] == 2
    assert "did not shut down within 10 s" in p.stderr, p.stderr[-3000:]


STOPS = [("openmpi", "horovodrun"), ("mpich", "mpich")]  # gloo; MPI under Hydra (ends the job when a rank leaves)


@pytest.mark.parametrize("mpi,launcher", STOPS, ids=[f"{m}-{la}" for m, la in STOPS])
def test_a_stopped_horovod_run_keeps_the_steps_every_rank_timed(horovod_images, mpi, launcher):
    """`docker stop`'s SIGTERM to a container whose first process is `benchrun launch` (it gets only the signals it
    handles: it handled none but SIGINT, and the run went on until SIGKILL, record unwritten), in the timed loop of
    two Horovod ranks: process 0's record totals both ranks' steps, exit 130, the container gone. Under Hydra, rank 1
    leaving at once had ended the job before process 0 wrote the record (rank_steps.LINGER_S)."""
    name = f"hvd-stop-test-{uuid.uuid4().hex[:8]}"  # not "dlbench-": another test counts benchrun's containers by it
    long = TINY.copy()
    long[long.index("--num-batches") + 1] = "100000"  # ended only by the stop
    started = Started(["docker", "run", "--rm", "--name", name, "--network=host", "--ipc=host", "--entrypoint",
                       "benchrun", horovod_images[mpi], "launch", "--launcher", launcher, "-n", "2", "--bench-command",
                       "bench", "--", "--framework", "torch", *long])
    try:
        started.wait_for("step 10/100000 (repeat 1)", RUN_TIMEOUT)
        subprocess.run(["docker", "kill", "--signal", "TERM", name], capture_output=True, timeout=60)
        out, err = started.communicate(timeout=120)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
    assert started.proc.returncode == EXIT_INTERRUPTED, err[-3000:]
    (rec,) = records(out)
    validate_record(rec)
    assert rec["status"] == "interrupted" and rec["error"]["signal"] == "SIGTERM", rec["error"]
    assert rec["world"]["strategy"] == "horovod" and rec["world"]["launcher"] == launcher
    assert "every rank completed" in rec["error"]["message"], rec["error"]["message"]
    assert [row["rank"] for row in rec["ranks"]] == [0, 1] and rec["throughput"]["total_images"] >= 2 * 2 * 10
    assert not subprocess.run(["docker", "ps", "-aq", "--filter", f"name={name}"], capture_output=True, text=True,
                              timeout=60).stdout.strip()


def test_horovod_comm_in_its_image(horovod_images):
    """`bench comm --backend horovod` for real in the Open MPI image under horovodrun (gloo): a busbw
    table, every result checked on both ranks, one schema-valid comm record (issue 12)."""
    from benchmarks.comm import record as comm_record

    p = in_image(horovod_images["openmpi"], "benchrun", "launch", "--launcher", "horovodrun", "-n", "2",
                 "--bench-command", "bench", "--timeout", "240", "--", "--framework", "torch", "comm",
                 "--backend", "horovod", "--max-bytes", "4M", "--step-factor", "4", "--iters", "3", "--warmup-iters", "1",
                 "--json", timeout=RUN_TIMEOUT)
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-5000:]}"
    (rec,) = records(p.stdout)
    assert comm_record.validate(rec) == rec and rec["kind"] == "comm"
    assert rec["status"] == "ok" and rec["correct"] and rec["config"]["backend"] == "horovod"
    assert rec["world"]["workers"] == 2 and rec["world"]["launcher"] == "horovodrun"
    assert {row["op"] for row in rec["results"]} == {"allreduce", "gradients"}  # Horovod has no send/recv: no ping-pong
    assert all(row["wrong"] == 0 and row["busbw_gbps"] > 0 for row in rec["results"])
    assert "avg allreduce busbw" in p.stdout + p.stderr


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_horovod_time_to_accuracy_in_its_image(horovod_images, framework):
    """bench --target-accuracy under horovodrun in the Open MPI image, on the image's own Fashion-MNIST
    (its late layer's Debian package; no mount), with LARS on Horovod's averaged gradients."""
    p = in_image(horovod_images["openmpi"], "benchrun", "launch", "--launcher", "horovodrun", "-n", "2",
                 "--bench-command", "bench", "--timeout", "240", "--", "--framework", framework, "--strategy", "horovod",
                 "--model", "smallcnn", "--batch-size", "32", "--base-lr", "0.02", "--eval-every", "1024",
                 "--max-epochs", "0.1", "--val-images", "1000", "--num-threads", "1", "--target-accuracy", "0.7",
                 "--lr-rule", "lars", "--json", timeout=RUN_TIMEOUT)
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-5000:]}"
    (rec,) = records(p.stdout)
    validate_record(rec)
    section = rec["accuracy"]
    assert rec["status"] == "ok" and section["outcome"] == "converged" and section["best_accuracy"] >= 0.7
    assert rec["world"]["launcher"] == "horovodrun" and rec["world"]["workers"] == 2 and rec["replicas"]["in_sync"]
    assert section["dataset"]["name"] == "fashion-mnist" and section["lr"]["global_batch"] == 64
