"""torch --compile: compile time recorded apart, eager fallback said, and nothing else changes."""

from __future__ import annotations

import math

import pytest

from infra.cache import CACHE
from infra.helpers import SMALL, bench, last_json_line, validate_record

RUN = ["--framework", "torch", "--model", "alexnet", "--image-size", "64", *SMALL, "--json", "--display-every", "0"]
# What a compiled run may change: its speed (and the energy that speed took), its numerics in the
# last bits, and the compile fields.
SPEED_AND_IDENTITY = ("run_id", "timestamp_utc", "throughput", "step_time_s", "input_wait_s", "repeats", "ranks",
                      "memory", "energy", "duration_s", "final_loss", "compile")

FLOP_RATES = ("achieved_flops_per_sec", "mfu")  # speed, in FLOP/s


def comparable(record: dict) -> dict:
    kept = {k: v for k, v in record.items() if k not in SPEED_AND_IDENTITY}
    kept["config"] = {k: v for k, v in record["config"].items() if k != "compile"}
    kept["replicas"] = {k: v for k, v in record["replicas"].items() if k != "checksums"}
    kept["provenance"] = {k: v for k, v in record["provenance"].items() if k != "command"}
    kept["flops"] = {k: v for k, v in record["flops"].items() if k not in FLOP_RATES}  # the counts must not change
    return kept


@pytest.mark.slow
def test_compiled_record_differs_only_by_compile_fields_and_speed():
    # Inductor's own cache, outside the clone (it keys entries on torch's version and the graph): a
    # warm run skips the C++ build (~20 s); Dynamo still traces and the section is filled the same way.
    env = {"TORCHINDUCTOR_CACHE_DIR": str(CACHE / "inductor")}
    eager = validate_record(last_json_line(bench(*RUN).stdout))
    result = bench(*RUN, "--compile", env=env)
    assert result.returncode == 0, result.stderr
    compiled = validate_record(last_json_line(result.stdout))
    assert eager["compile"] is None and eager["config"]["compile"] is None
    assert compiled["config"]["compile"] == "default"
    section = compiled["compile"]
    assert section["mode"] == "default" and section["backend"] == "inductor"
    assert section["fell_back_to_eager"] is False and section["fallback_reason"] is None
    assert section["graphs"] >= 1 and section["graph_breaks"] == 0
    assert section["graphs_at_end"] == section["graphs"], "recompiled inside warmup or the timed loop"
    # Compilation is outside the timed loop: it took longer than the whole timed loop did.
    assert section["compile_time_s"] > compiled["throughput"]["total_wall_time_s"]
    assert comparable(compiled) == comparable(eager)
    assert math.isclose(compiled["final_loss"], eager["final_loss"], rel_tol=1e-2)


@pytest.mark.slow
def test_failed_compilation_trains_eager_and_says_why(tmp_path):
    # A real failure: inductor's C++ compiler is /bin/false (and nothing cached to dodge it).
    env = {"CXX": "/bin/false", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TORCHINDUCTOR_FX_GRAPH_CACHE": "0"}
    result = bench(*RUN, "--compile", "max-autotune", env=env)
    assert result.returncode == 0, result.stderr
    record = validate_record(last_json_line(result.stdout))
    section = record["compile"]
    assert section["mode"] == "max-autotune" and section["fell_back_to_eager"] is True
    assert "compiler" in section["fallback_reason"].lower()
    assert "torch.compile failed, training eager" in result.stderr
    assert record["status"] == "ok" and record["throughput"]["images_per_sec"] > 0


def test_tensorflow_first_step_is_timed_apart():
    result = bench("--framework", "tensorflow", "--model", "alexnet", "--image-size", "64", *SMALL, "--json",
                   "--display-every", "0")
    assert result.returncode == 0, result.stderr
    section = validate_record(last_json_line(result.stdout))["compile"]
    assert (section["mode"], section["backend"], section["fell_back_to_eager"]) == ("graph", "tf.function", False)
    assert section["compile_time_s"] > 0 and section["graph_breaks"] is None


@pytest.mark.parametrize(
    "args, message",
    [
        (["--framework", "tensorflow", "--compile"], "--compile applies to --framework torch only"),
        (["--framework", "torch", "--compile", "fast"], "--compile 'fast' is invalid (choices: default, reduce-overhead, "
                                                        "max-autotune)"),
    ],
)
def test_compile_bad_input_is_one_line_exit_2(args, message):
    result = bench(*args)
    assert result.returncode == 2
    assert result.stderr.strip().startswith(f"bench: error: {message}") and "\n" not in result.stderr.strip()
