"""The dlbench images, built once per test run (and not at all when their inputs have not changed).

`dlbench_images` (torch and TensorFlow) and `horovod_images` are session fixtures
shared by every module that runs containers; they build through the project's own
`make -f containers/images.mk` from the wheelhouse (offline, cached outside the
clone by containers/wheelhouse.sh) and stamp the image ids with a key over every
input of the build (Dockerfiles, containers/, pyproject, benchmarks/, runners/,
the wheel list, the base image's id). With the same key and the same ids, a
later run or a fresh clone skips `make` altogether.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys

import pytest

from .cache import CACHE, inputs_key, once
from .helpers import ROOT, run

C = ROOT / "containers"
BASE_IMAGE = os.environ.get("DLBENCH_TEST_BASE_IMAGE", "dlbench-base:bookworm")
VERSION = re.search(r'__version__ = "(.+)"', (ROOT / "benchmarks/__init__.py").read_text()).group(1)
IMAGES = {"torch": f"dlbench-torch:{VERSION}", "tensorflow": f"dlbench-tensorflow:{VERSION}"}
HOROVOD_IMAGES = {"openmpi": f"dlbench-horovod-openmpi:{VERSION}", "mpich": f"dlbench-horovod-mpich:{VERSION}"}
IMAGE_INPUTS = ["Dockerfile.tf", "Dockerfile.torch", ".dockerignore", "pyproject.toml", "README.md",
                "containers/image", "containers/base", "containers/build.sh", "containers/lib.sh",
                "containers/images.mk", "containers/late", "benchmarks"]
HOROVOD_INPUTS = ["containers/horovod", "runners"]
WHEELHOUSES = ("wheelhouse", "wheelhouse-late")  # the images' dependency layers, their late layer


def image_id(image: str) -> str:
    p = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", image], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else ""


def ids_of(images) -> str:
    return "\n".join(f"{image} {image_id(image)}" for image in images) + "\n"


def still_there(text: str) -> bool:
    """The stamped images exist with the stamped ids (nobody rebuilt or removed them)."""
    pairs = [line.split() for line in text.splitlines() if line.strip()]
    return bool(pairs) and all(len(p) == 2 and image_id(p[0]) == p[1] for p in pairs)


def ensure_wheelhouse(sdist: bool = False) -> None:
    """./wheelhouse and ./wheelhouse-late filled (hard links into the caches outside the clone);
    DLBENCH_TEST_WHEELHOUSE=0: PyPI."""
    if os.environ.get("DLBENCH_TEST_WHEELHOUSE", "1") == "0":
        return
    wanted = {**dict.fromkeys(WHEELHOUSES, "*.whl"), **({"wheelhouse": "horovod-*.tar.gz"} if sdist else {})}
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "wheelhouse.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other test worker may be filling it right now
        if not all(list((ROOT / folder).glob(pattern)) for folder, pattern in wanted.items()):
            p = run(["make", "-f", C / "images.mk", "wheelhouse", f"PYTHON={sys.executable}"], timeout=1800)
            assert p.returncode == 0, f"make wheelhouse failed:\n{p.stderr[-3000:]}"


def wheel_list() -> str:
    return " ".join(sorted(f"{p.parent.name}/{p.name}" for folder in WHEELHOUSES for p in (ROOT / folder).glob("*")
                           if p.is_file()))


def make(target: str, timeout: float) -> None:
    p = run(["make", "-f", C / "images.mk", target, f"BASE_IMAGE={BASE_IMAGE}"], timeout=timeout)
    assert p.returncode == 0, f"make {target} failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"


@pytest.fixture(scope="session")
def dlbench_images(docker) -> dict[str, str]:
    ensure_wheelhouse()
    key = inputs_key(IMAGE_INPUTS, [BASE_IMAGE, image_id(BASE_IMAGE), wheel_list()])

    def build() -> str:
        make("images", timeout=2400)
        return ids_of(IMAGES.values())

    once("images", key, build, still_there)
    return IMAGES


@pytest.fixture(scope="session")
def horovod_images(dlbench_images) -> dict[str, str]:
    ensure_wheelhouse(sdist=True)
    key = inputs_key([*IMAGE_INPUTS, *HOROVOD_INPUTS], [BASE_IMAGE, image_id(IMAGES["torch"]), wheel_list()])

    def build() -> str:
        make("images-horovod", timeout=3600)
        return ids_of(HOROVOD_IMAGES.values())

    once("images-horovod", key, build, still_there)
    return HOROVOD_IMAGES
