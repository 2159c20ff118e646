import pytest

from benchmarks.provenance import cpu_model, detect_container_runtime


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
    assert detect_container_runtime(env, paths.__contains__) == expected


def test_cpu_model_from_cpuinfo():
    assert cpu_model("processor\t: 0\nmodel name\t: Example CPU @ 2.0GHz\n") == "Example CPU @ 2.0GHz"
