import pytest

from benchmarks.results.output import headline
from benchmarks.results.provenance import cpu_model, detect_container_runtime


@pytest.mark.parametrize(
    "env, paths, expected",
    [
        ({}, set(), "none"),
        ({}, {"/.dockerenv"}, "docker"),
        ({}, {"/run/.containerenv"}, "podman"),
        ({"container": "podman"}, set(), "podman"),
        ({"SINGULARITY_CONTAINER": "/img.sif"}, set(), "singularity"),
        ({}, {"/.singularity.d"}, "singularity"),
        ({"APPTAINER_CONTAINER": "/img.sif", "SINGULARITY_CONTAINER": "/img.sif"}, {"/.singularity.d"}, "apptainer"),
        ({"SHIFTER_RUNTIME": "1"}, set(), "shifter"),
        ({"CH_RUNNING": "Weird Al Yankovic"}, {"/.dockerenv"}, "charliecloud"),
        ({"container_uuid": "4a9b7c1e-0d2f", "container_execmode": "P1"}, set(), "udocker"),
        ({"container_uuid": "4a9b7c1e-0d2f"}, {"/.dockerenv"}, "docker"),  # one udocker variable alone is not udocker
    ],
)
def test_detect_container_runtime(env, paths, expected):
    assert detect_container_runtime(env, paths.__contains__, root=lambda: HOST_ROOT) == expected


HOST_ROOT = "rw,relatime,discard"
CONTAINERD_ROOT = ("rw,relatime,lowerdir=/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs,"
                   "upperdir=/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/2/fs")  # as `ctr run` mounts it


def test_a_containerd_snapshot_as_root_is_containerd_unless_docker_or_podman_says_so():
    assert detect_container_runtime({}, set().__contains__, root=lambda: CONTAINERD_ROOT) == "containerd"
    for marker, runtime in (("/.dockerenv", "docker"), ("/run/.containerenv", "podman")):  # their containerd stores
        assert detect_container_runtime({}, {marker}.__contains__, root=lambda: CONTAINERD_ROOT) == runtime


def test_cpu_model_from_cpuinfo():
    assert cpu_model("processor\t: 0\nmodel name\t: Example CPU @ 2.0GHz\n") == "Example CPU @ 2.0GHz"


@pytest.mark.parametrize("kind, used, asked, shown", [
    ("cpu", 2, None, ", 2 threads |"),  # what the framework ran with, asked for or not
    ("cpu", 1, 1, ", 1 thread |"),
    ("cpu", None, None, " |"),  # TensorFlow picking at run time: nothing to show
    ("gpu", 16, None, " |"),  # a GPU run's CPU threads only when asked for
    ("gpu", 4, 4, ", 4 threads |"),
])
def test_headline_shows_the_threads_a_cpu_run_used(kind, used, asked, shown):
    record = {"config": {"framework": "torch", "model": "alexnet", "batch_size": 2, "image_size": 64, "precision": "fp32",
                         "data": "synthetic", "device": "auto", "num_threads": asked},
              "provenance": {"container_runtime": "docker",
                             "framework": {"version": "2", "device_kind": kind, "device_name": "X", "intra_op_threads": used}}}
    assert f"{kind}: X{shown} runtime: docker" in headline(record)
