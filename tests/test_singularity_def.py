"""Singularity.def must promise what the Docker images promise.

The recipe bootstraps from the Docker image (docker-daemon, or the image saved
as an OCI layout) and restates its entrypoint, environment and labels; these
tests compare them with Dockerfile.tf / Dockerfile.torch so the two cannot
drift. They read the recipe only: tests/test_runtimes_apptainer.py builds and
runs it.
"""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path

import pytest

spython_parsers = pytest.importorskip("spython.main.parse.parsers", reason="spython not installed (pip install spython)")

from containers_recipes import DOCKER_ONLY_ENV, DOCKERFILES, SINGULARITY_DEF, parse_dockerfile, render_def  # noqa: E402 - only once spython is known to be there

FRAMEWORKS = sorted(DOCKERFILES)


def parse_def(text: str):
    """spython's recipe; comment lines left out, as Apptainer does (spython reads `bootstrap` in one as the header)."""
    with tempfile.NamedTemporaryFile("w", suffix=".def", delete=False) as f:
        f.write("\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    try:
        recipes = spython_parsers.SingularityParser(f.name).recipe
    finally:
        Path(f.name).unlink()
    assert len(recipes) == 1, f"expected one stage, got {list(recipes)}"
    return next(iter(recipes.values()))


def mismatches(def_text: str, dockerfile_text: str, framework: str) -> list[str]:
    """Every way the rendered recipe disagrees with the Dockerfile's final stage."""
    rec = parse_def(render_def(def_text, FRAMEWORK=framework))
    final = parse_dockerfile(dockerfile_text)["final"]
    out = []

    argv = shlex.split(rec.cmd or "")
    if argv[:1] != ["exec"] or argv[-1:] != ["$@"] or argv[1:-1] != final.entrypoint:
        out.append(f"runscript {rec.cmd!r} does not exec the entrypoint {final.entrypoint} with \"$@\"")

    def_env = dict(line.split("=", 1) for line in rec.environ)
    docker_env = {k: v for k, v in final.env.items() if k not in DOCKER_ONLY_ENV}
    for key in sorted(set(def_env) | set(docker_env)):
        if def_env.get(key) != docker_env.get(key):
            out.append(f"env {key}: Singularity.def {def_env.get(key)!r} != Dockerfile {docker_env.get(key)!r}")

    def_labels = dict(line.split(None, 1) for line in rec.labels)
    for key, val in def_labels.items():
        if final.labels.get(key) != val:
            out.append(f"label {key}: Singularity.def {val!r} != Dockerfile {final.labels.get(key)!r}")
    for key in ("io.dlbench.framework", "org.opencontainers.image.title"):
        if key not in def_labels:
            out.append(f"label {key} missing from Singularity.def")

    image_name = final.args.get("IMAGE_NAME")
    if rec.fromHeader.strip() != image_name:
        out.append(f"bootstraps from {rec.fromHeader!r}, but the Dockerfile names its image {image_name!r}")
    return out


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_def_agrees_with_dockerfile(framework):
    problems = mismatches(SINGULARITY_DEF.read_text(), DOCKERFILES[framework].read_text(), framework)
    assert not problems, "\n".join(problems)


def test_def_bootstraps_from_the_docker_daemon_or_a_layout():
    """By default from the local Docker daemon's image of the framework; BOOTSTRAP=oci FROM=DIR from that image
    saved as an OCI layout (how the tests build it: tests/test_runtimes_apptainer.py)."""
    text = SINGULARITY_DEF.read_text()
    default = parse_def(render_def(text, FRAMEWORK="tensorflow", DLBENCH_TAG="0.1.0"))
    assert (default.fromHeader.strip(), render_def(text).splitlines()[0]) == (
        "dlbench-tensorflow:0.1.0", "Bootstrap: docker-daemon")
    layout = render_def(text, FRAMEWORK="torch", BOOTSTRAP="oci", FROM="/tmp/layout")
    assert layout.splitlines()[:2] == ["Bootstrap: oci", "From: /tmp/layout"]


# The comparison itself must be able to fail: feed it drifted recipes.

def test_drifted_environment_is_caught():
    text = SINGULARITY_DEF.read_text().replace("export PYTHONUNBUFFERED=1", "export PYTHONUNBUFFERED=0")
    assert any("PYTHONUNBUFFERED" in p for p in mismatches(text, DOCKERFILES["torch"].read_text(), "torch"))


def test_new_dockerfile_env_is_caught():
    docker = DOCKERFILES["tensorflow"].read_text().replace("USER bench", "ENV TF_CPP_MIN_LOG_LEVEL=2\nUSER bench")
    problems = mismatches(SINGULARITY_DEF.read_text(), docker, "tensorflow")
    assert any("TF_CPP_MIN_LOG_LEVEL" in p for p in problems)


def test_drifted_runscript_and_label_are_caught():
    text = SINGULARITY_DEF.read_text().replace('exec bench "$@"', 'exec python -m benchmarks "$@"')
    text = text.replace("io.dlbench.framework {{ FRAMEWORK }}", "io.dlbench.framework pytorch")
    problems = mismatches(text, DOCKERFILES["torch"].read_text(), "torch")
    assert any("runscript" in p for p in problems) and any("io.dlbench.framework" in p for p in problems)


def test_unknown_template_argument_is_an_error():
    with pytest.raises(KeyError):
        render_def("Bootstrap: docker-daemon\nFrom: x:{{ NOPE }}\n")
