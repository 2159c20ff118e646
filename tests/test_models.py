"""Every model on both frameworks, for real, at a small size: the record must validate."""

import json
import math

import pytest

from infra.helpers import ROOT, SMALL, bench, last_json_line, validate_record

MODELS = {"alexnet": 64, "resnet50": 64, "resnet101": 64, "resnet152": 64, "inception3": 96}
PARAMETERS = {}  # model -> {framework: trainable parameter count}, filled as tests run


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
@pytest.mark.parametrize("model", list(MODELS))
def test_model_trains_and_record_validates(framework, model):
    result = bench("--framework", framework, "--model", model, "--image-size", str(MODELS[model]), *SMALL, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    record = validate_record(last_json_line(result.stdout))
    assert record["status"] == "ok" and record["error"] is None
    assert record["config"]["framework"] == framework and record["config"]["model"] == model
    steps = record["step_time_s"]
    assert steps["n"] == 2 and steps["min"] > 0
    throughput = record["throughput"]
    assert throughput["total_images"] == 4
    assert throughput["images_per_sec"] == pytest.approx(4 / throughput["total_wall_time_s"])
    assert record["memory"]["host_rss_peak_bytes"] > 100 * 2**20
    fw = record["provenance"]["framework"]
    on_gpu = fw["visible_gpus"] > 0  # --device auto trains on a GPU whenever one is visible
    assert fw["name"] == framework and fw["device_kind"] == ("gpu" if on_gpu else "cpu") and fw["version"]
    if on_gpu:
        assert record["memory"]["allocator_peak_bytes"] > 0 and record["memory"]["device_peak_bytes"] > 0
    else:
        assert record["memory"]["allocator_peak_bytes"] is None and record["memory"]["device_peak_bytes"] is None
    assert math.isfinite(record["final_loss"])
    assert record["model"]["aux_head"] is False
    # the human summary went to stderr and ends with the throughput line
    assert "total images/sec: " in result.stderr.strip().splitlines()[-1]
    PARAMETERS.setdefault(model, {})[framework] = record["model"]["parameters"]
    counts = PARAMETERS[model]
    if len(counts) == 2:  # both frameworks train the same network (Keras ResNets add conv biases)
        assert counts["torch"] == pytest.approx(counts["tensorflow"], rel=0.02), counts


@pytest.mark.slow
def test_repeats_output_append_and_mllog(tmp_path):
    output = tmp_path / "results" / "runs.jsonl"
    args = ["--framework", "torch", "--model", "alexnet", "--image-size", "64", *SMALL, "--repeats", "3"]
    first = bench(*args, "--output", str(output), "--mllog")
    assert first.returncode == 0, first.stderr[-3000:]
    stdout = first.stdout.splitlines()
    mllog = [json.loads(line.split(" ", 1)[1]) for line in stdout if line.startswith(":::MLLOG ")]
    keys = [event["key"] for event in mllog]
    for key in ("init_start", "init_stop", "run_start", "epoch_start", "epoch_stop", "run_stop"):
        assert key in keys
    assert keys.count("epoch_start") == 3
    assert stdout[-1].startswith("total images/sec: ") and " ± " in stdout[-1]
    second = bench(*args, "--output", str(output))
    assert second.returncode == 0
    records = [validate_record(json.loads(line)) for line in output.read_text().splitlines()]
    assert len(records) == 2 and records[0]["run_id"] != records[1]["run_id"]
    record = records[0]
    assert [r["index"] for r in record["repeats"]] == [0, 1, 2]
    assert record["throughput"]["ci_method"] == "t-interval over repeats"
    rates = [r["images_per_sec"] for r in record["repeats"]]
    assert record["throughput"]["images_per_sec"] == pytest.approx(sum(rates) / 3)
    assert record["step_time_s"]["n"] == 6
    assert record["memory"]["host_rss_peak_since"] == "warmup_end"


@pytest.mark.slow
def test_inception_aux_head_at_299():
    """Both frameworks add the auxiliary classifier's loss at the size it was designed for."""
    for framework in ("torch", "tensorflow"):
        result = bench("--framework", framework, "--model", "inception3", "--batch-size", "2",
                       "--num-warmup-batches", "0", "--num-batches", "1", "--json")
        assert result.returncode == 0, result.stderr[-3000:]
        record = validate_record(last_json_line(result.stdout))
        assert record["config"]["image_size"] == 299 and record["model"]["aux_head"] is True


_ACCEPTS = {  # prints {model: [accepts min-1, accepts min]} for one framework, forward pass only
    "torch": """
import json, sys, torch, torchvision
from benchmarks.settings.config import MODELS
from benchmarks.frameworks.torch_backend import build_model
out = {}
for name, spec in MODELS.items():
    out[name] = []
    for size in (spec.min_image_size - 1, spec.min_image_size):
        try:
            net = build_model(name, 10, False, size).eval()
            with torch.no_grad():
                net(torch.zeros(1, 3, size, size))
            out[name].append(True)
        except (RuntimeError, ValueError):
            out[name].append(False)
print(json.dumps(out))
""",
    "tensorflow": """
import json
from benchmarks.settings.config import MODELS
from benchmarks.frameworks import keras_models
out = {}
for name, spec in MODELS.items():
    out[name] = []
    for size in (spec.min_image_size - 1, spec.min_image_size):
        try:
            net = keras_models.build(name, (size, size, 3), 10, False)
            net(__import__("numpy").zeros((1, size, size, 3), "float32"), training=False)
            out[name].append(True)
        except (ValueError, Exception):
            out[name].append(False)
print(json.dumps(out))
""",
}


@pytest.mark.slow
def test_models_train_at_minimum_image_size():
    """config.MODELS' min_image_size is the smallest input both frameworks accept: both run a model at
    it, and at one pixel less at least one of them refuses."""
    import subprocess
    import sys

    from benchmarks.settings.config import MODELS

    accepts = {}
    for framework, script in _ACCEPTS.items():
        result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        accepts[framework] = json.loads(result.stdout.strip().splitlines()[-1])
    for model in MODELS:
        below = [accepts[f][model][0] for f in accepts]
        at = [accepts[f][model][1] for f in accepts]
        assert all(at), (model, accepts)
        assert not all(below), (model, accepts)
