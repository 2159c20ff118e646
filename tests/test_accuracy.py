"""Time to accuracy (bench --target-accuracy): the data readers, LR rules, convergence bookkeeping and
olympic mean as fast unit tests; real runs on Fashion-MNIST (single and two ranks, both frameworks)
that must reach well above chance within seconds, and a negative control (random labels) that must not."""

from __future__ import annotations

import gzip
import json
import math
import struct
import subprocess
import sys

import numpy as np
import pytest

from benchmarks.core.errors import UsageError
from benchmarks.data import labelled
from benchmarks.data.fashion_mnist import FASHION_MNIST_PACKAGE
from benchmarks.measure import stats
from benchmarks.tta import convergence, lr_rules
from infra.helpers import ROOT, bench, benchrun, last_json_line, run, validate_record

# A run that must converge: 1,024-sample evaluations on 1,000 validation images, at most 0.1 epoch.
FAST = ["--model", "smallcnn", "--batch-size", "32", "--base-lr", "0.02", "--eval-every", "1024", "--max-epochs", "0.1",
        "--val-images", "1000", "--num-threads", "1", "--json"]


def write_idx(path, array: np.ndarray) -> None:
    code = {np.dtype("uint8"): 0x08}[array.dtype]
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.tobytes())


# -- data -----------------------------------------------------------------------------------------


def test_idx_round_trip_and_bad_files(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / "x.gz", images)
    assert np.array_equal(labelled.read_idx(tmp_path / "x.gz"), images)
    (tmp_path / "bad.gz").write_bytes(gzip.compress(b"\x01\x02\x08\x01\x00\x00\x00\x01\x00"))
    with pytest.raises(UsageError, match="bad magic"):
        labelled.read_idx(tmp_path / "bad.gz")
    (tmp_path / "short.gz").write_bytes(gzip.compress(bytes([0, 0, 8, 1]) + struct.pack(">I", 5) + b"abc"))
    with pytest.raises(UsageError, match="3 bytes, its header promises 5"):
        labelled.read_idx(tmp_path / "short.gz")
    (tmp_path / "notgz.gz").write_bytes(b"plain")
    with pytest.raises(UsageError, match="cannot be read"):
        labelled.read_idx(tmp_path / "notgz.gz")


def test_fashion_mnist_directory_checked_in_one_line(tmp_path):
    with pytest.raises(UsageError, match=f"does not exist .*apt-get install {FASHION_MNIST_PACKAGE}"):
        labelled.check_fashion_mnist(tmp_path / "none")
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", np.zeros((1, 28, 28), np.uint8))
    with pytest.raises(UsageError, match="lacks train-labels-idx1-ubyte.gz, t10k-images"):
        labelled.check_fashion_mnist(tmp_path)


def test_missing_dataset_is_one_line_exit_2(tmp_path):
    result = bench("--framework", "torch", "--model", "smallcnn", "--target-accuracy", "0.8",
                   "--fashion-mnist-dir", str(tmp_path / "absent"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "apt-get install dataset-fashion-mnist" in result.stderr and "--data-dir" in result.stderr


def small_fashion_mnist(root, train: int = 64, val: int = 16):
    """The four files of a Fashion-MNIST in miniature (random pixels, labels 0-9): what the checks read."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for (images, labels), count in zip(labelled.FASHION_MNIST_FILES.values(), (train, val)):
        write_idx(root / images, rng.integers(0, 256, (count, 28, 28), dtype=np.uint8))
        write_idx(root / labels, rng.integers(0, 10, count, dtype=np.uint8))
    return root


def test_fashion_mnist_files_are_read_through_before_anything_is_built(tmp_path):
    """Each file decompressed once: a cut gzip stream, data shorter than its header says, counts that
    disagree, a foreign shape or label are each one line."""
    root = small_fashion_mnist(tmp_path / "fm")
    assert labelled.check_fashion_mnist_files(root) == 64
    train_images = root / "train-images-idx3-ubyte.gz"
    assert labelled.idx_shape(train_images) == (64, 28, 28)
    whole = train_images.read_bytes()
    train_images.write_bytes(whole[: len(whole) - 100])  # a download cut short
    with pytest.raises(UsageError, match=r"train-images-idx3-ubyte.gz: cannot be read \(Compressed file ended"):
        labelled.check_fashion_mnist_files(root)
    with gzip.open(train_images, "wb") as f:  # a whole gzip of a cut IDX file
        f.write(bytes([0, 0, 8, 3]) + struct.pack(">3I", 64, 28, 28) + bytes(28 * 28 * 63))
    with pytest.raises(UsageError, match="IDX data has 49392 bytes, its header promises 50176"):
        labelled.check_fashion_mnist_files(root)
    small_fashion_mnist(root)
    write_idx(root / "t10k-labels-idx1-ubyte.gz", np.zeros(15, np.uint8))
    with pytest.raises(UsageError, match=r"holds labels of shape \(15,\) for the 16 images of .*one label per image"):
        labelled.check_fashion_mnist_files(root)
    write_idx(root / "t10k-labels-idx1-ubyte.gz", np.full(16, 10, np.uint8))
    with pytest.raises(UsageError, match="a label 10 is past Fashion-MNIST's 10 classes"):
        labelled.check_fashion_mnist_files(root)
    write_idx(root / "t10k-images-idx3-ubyte.gz", np.zeros((16, 32, 32), np.uint8))
    with pytest.raises(UsageError, match=r"shape \(16, 32, 32\), not N x 28 x 28"):
        labelled.check_fashion_mnist_files(root)


def test_a_truncated_fashion_mnist_is_the_only_line_bench_prints(tmp_path):
    """Refused before the worker starts: no `building smallcnn` line before it, nothing on stdout."""
    root = small_fashion_mnist(tmp_path / "fm")
    val_labels = root / "t10k-labels-idx1-ubyte.gz"
    val_labels.write_bytes(val_labels.read_bytes()[:-12])
    result = bench("--framework", "torch", "--model", "smallcnn", "--target-accuracy", "0.8",
                   "--fashion-mnist-dir", root, timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"bench: error: {val_labels}: cannot be read (Compressed file ended before "
                                          "the end-of-stream marker was reached)"]
    assert result.stdout == ""


def test_a_batch_larger_than_the_training_set_is_refused_before_anything_is_built(tmp_path):
    root = small_fashion_mnist(tmp_path / "fm")
    result = bench("--framework", "torch", "--model", "smallcnn", "--target-accuracy", "0.8",
                   "--fashion-mnist-dir", root, "--batch-size", "65", timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == ["bench: error: the training set has 64 images, fewer than one batch "
                                          "(--batch-size 65)"]


def test_an_image_folder_without_a_validation_split_is_refused_before_anything_is_built(tmp_path):
    """Two images, --val-fraction 0.1: both land in training. The split is made before the worker starts."""
    from benchmarks.data.dataset import make_dataset

    root = make_dataset(tmp_path / "ds", images=2, classes=1, min_size=32, max_size=40)
    result = bench("--framework", "torch", "--model", "smallcnn", "--target-accuracy", "0.8", "--data-dir", root,
                   "--image-size", "32", timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"bench: error: --data-dir '{root}': --val-fraction 0.1 leaves 2 training "
                                          "and 0 validation images; both need at least one"]
    assert result.stdout == ""


@pytest.mark.parametrize("args, message", [
    (["--lr-rule", "linear"], "--lr-rule applies to time-to-accuracy runs only"),
    (["--target-accuracy", "1.5"], "--target-accuracy is a fraction"),
    (["--target-accuracy", "0.5", "--lr-rule", "cubic"], "--lr-rule 'cubic' is invalid (choices: none, linear, sqrt, lars)"),
    (["--target-accuracy", "0.5", "--val-fraction", "1"], "--val-fraction must be between 0 and 1"),
])
def test_accuracy_options_checked(args, message):
    from benchmarks import cli

    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cli.config_of(cli.bench_parser().parse_args(["--framework", "torch", "--model", "smallcnn", *args]),
                      installed_here=False)


def test_pad_resize_and_grey_to_rgb():
    images = np.full((2, 28, 28, 1), 255, np.uint8)
    assert labelled.fit(28, 32) == "zero-padded" and labelled.fit(28, 75) == "resized (nearest)"
    padded = labelled.resize(images, 32)
    assert padded.shape == (2, 32, 32, 1) and padded[:, :2].max() == 0 and padded[:, 2:30, 2:30].min() == 255
    assert labelled.resize(images, 75).shape == (2, 75, 75, 1)
    data = labelled.LabelledData("fashion-mnist", "-", None, None, 10, 28, (0.5,) * 3, (0.5,) * 3)
    prepared = data.prepare(images, 28)
    assert prepared.shape == (2, 28, 28, 3) and prepared.dtype == np.float32 and np.allclose(prepared, 1.0)


def test_shards_are_disjoint_and_cover_everything():
    shards = [labelled.shard(10, r, 3) for r in range(3)]
    assert sorted(np.concatenate(shards).tolist()) == list(range(10))  # no padding, no repeats


def test_training_batches_deal_one_permutation_to_the_ranks():
    streams = [labelled.train_batches(10, 2, rank, 2, seed=7) for rank in range(2)]
    epoch = [np.concatenate([next(s) for s in streams]) for _ in range(2)]  # 10 // 4 = 2 global batches per epoch
    assert len(set(np.concatenate(epoch).tolist())) == 8  # distinct images: the remainder of the epoch dropped
    again = labelled.train_batches(10, 2, 0, 2, seed=7)
    assert np.array_equal(next(again), epoch[0][:2])  # the same order for the same seed
    with pytest.raises(UsageError, match="fewer than one global batch"):
        next(labelled.train_batches(3, 2, 0, 2, seed=0))


def test_held_out_split_is_stable():
    picks = [labelled.held_out(f"class_{i % 3}/img_{i}.jpg", 0.2) for i in range(2000)]
    assert picks == [labelled.held_out(f"class_{i % 3}/img_{i}.jpg", 0.2) for i in range(2000)]
    assert 0.17 < sum(picks) / len(picks) < 0.23


# -- learning-rate rules --------------------------------------------------------------------------


def test_lr_rules_scale_and_warm_up():
    assert lr_rules.scale("none", 512, 32) == 1.0
    assert lr_rules.scale("linear", 512, 32) == 16.0 == lr_rules.scale("lars", 512, 32)
    assert lr_rules.scale("sqrt", 512, 32) == 4.0
    schedule = lr_rules.schedule("linear", 0.1, 32, 128, None, 1000)
    assert schedule.warmup_samples == 1000 and schedule.peak_lr == pytest.approx(0.4)  # one epoch by default
    assert schedule.lr(0) == pytest.approx(0.1) and schedule.lr(500) == pytest.approx(0.25)
    assert schedule.lr(1000) == schedule.lr(5000) == pytest.approx(0.4)
    assert lr_rules.schedule("sqrt", 0.1, 32, 128, None, 1000).warmup_samples == 0
    assert lr_rules.schedule("none", 0.1, 32, 32, 2.0, 1000).lr(0) == 0.1  # nothing to warm up to
    assert schedule.as_dict()["lars_eta"] is None
    assert lr_rules.schedule("lars", 0.1, 32, 128, 0, 1000).as_dict()["lars_eta"] == lr_rules.LARS_ETA


def test_lars_factor_clips_at_the_global_rate():
    def factor(w, g, lr):
        return float(lr_rules.lars_factor(np.float64(w), np.float64(g), lr, np.minimum, np.where))

    assert factor(1.0, 1.0, 0.1) == pytest.approx(lr_rules.LARS_ETA / 0.1)  # trust below the global rate
    assert factor(100.0, 0.01, 0.1) == 1.0  # never above it
    assert factor(0.0, 1.0, 0.1) == 1.0 and factor(1.0, 0.0, 0.1) == 1.0
    assert not lr_rules.lars_applies((64,)) and lr_rules.lars_applies((3, 3, 3, 32))


# -- convergence bookkeeping and scoring ----------------------------------------------------------


def point(samples, accuracy, wall=1.0):
    return convergence.Point(samples, samples / 1000, wall, accuracy, 1.0, 1.0, 0.1)


def test_budget_evaluates_at_fixed_samples_and_stops():
    budget = convergence.Budget(0.8, 300, 1.0, 60.0, 1000)
    assert [budget.next_eval(s) for s in (0, 299, 300, 640)] == [300, 300, 600, 900]
    assert budget.next_eval(960) == 1000  # the last evaluation is at the epoch budget, not past it
    assert budget.outcome(point(600, 0.8)) == convergence.CONVERGED
    assert budget.outcome(point(600, 0.79)) is None
    assert budget.outcome(point(1000, 0.79)) == convergence.NOT_CONVERGED
    assert budget.outcome(point(600, 0.79, wall=61.0)) == convergence.NOT_CONVERGED


def test_target_extraction_from_a_curve():
    curve = [point(300, 0.5, 2).as_dict(), point(600, 0.82, 4).as_dict(), point(900, 0.81, 6).as_dict()]
    result = convergence.summary(curve, 0.8)
    assert result["outcome"] == "converged" and result["samples_to_target"] == 600 and result["time_to_target_s"] == 4
    assert result["best_accuracy"] == 0.82
    missed = convergence.summary(curve, 0.9)
    assert missed["outcome"] == "not_converged" and missed["samples_to_target"] is None and missed["best_at_samples"] == 600
    assert convergence.summary(curve, 0.9, stopped=True)["outcome"] == "stopped"  # stopped before either
    assert convergence.summary(curve, 0.8, stopped=True)["outcome"] == "converged"  # what it reached, it reached


def test_distributed_evaluation_sums_counts():
    shards = [{"correct": 9, "loss_sum": 1.0, "images": 10}, {"correct": 0, "loss_sum": 3.0, "images": 1}]
    accuracy, loss = convergence.eval_total(shards)
    assert accuracy == pytest.approx(9 / 11) and loss == pytest.approx(4 / 11)  # not the mean of 0.9 and 0.0


def test_olympic_mean():
    assert stats.olympic_mean([1, 2, 3, 4]) == 2.5  # below five: the plain mean
    assert stats.olympic_mean([100, 2, 3, 4, 1]) == 3.0  # fastest and slowest dropped
    with pytest.raises(ValueError):
        stats.olympic_mean([])


def test_sweep_plans_pass_the_accuracy_options():
    from runners.sweep import PlanError, expand, parse_plan

    plan = parse_plan({"matrix": {"framework": "torch", "model": "smallcnn", "batch_size": 32, "ranks": [1, 2],
                                  "strategy": "ddp"},
                       "bench": {"target_accuracy": 0.8, "lr_rule": "linear", "base_lr": 0.02, "eval_every": 3000,
                                 "warmup_epochs": 0}}, "plan.yaml")
    points, _ = expand(plan)
    args = points[1].spec().to_argv()
    for flag, value in (("--target-accuracy", "0.8"), ("--lr-rule", "linear"), ("--base-lr", "0.02"),
                        ("--eval-every", "3000"), ("--warmup-epochs", "0.0")):
        assert args[args.index(flag) + 1] == value, args
    with pytest.raises(PlanError, match="lr_rule: unknown value 'cubic'"):
        parse_plan({"matrix": {"framework": "torch", "model": "smallcnn", "batch_size": 32},
                    "bench": {"lr_rule": "cubic"}}, "plan.yaml")
    with pytest.raises(PlanError, match=r"target_accuracy: is a fraction in \(0, 1\]"):
        parse_plan({"matrix": {"framework": "torch", "model": "smallcnn", "batch_size": 32},
                    "bench": {"target_accuracy": 0}}, "plan.yaml")



STUDY = ROOT / "examples" / "accuracy-scaling"


def test_the_committed_study_answers_every_point_of_its_plans_and_its_report_is_regenerated(tmp_path):
    """The study's stores hold an ok record with an accuracy section for every point its plans expand to
    (so the README's claims rest on the plans as committed), and benchrun report on them writes the
    committed report.md."""
    from runners.sweep import expand, load_plan

    stores = {"plan-horovod.yaml": "results-horovod.jsonl"}
    for plan_path in sorted(STUDY.glob("plan-*.yaml")):
        entries = [json.loads(line) for line in (STUDY / stores.get(plan_path.name, "results.jsonl")).open()]
        stored = {e["sweep"]["config_hash"] for e in entries
                  if e["record"] and e["record"]["status"] == "ok" and e["record"]["accuracy"]}
        points, _ = expand(load_plan(plan_path))
        missing = [point.label for point in points if point.config_hash not in stored]
        assert points and not missing, f"{plan_path.name}: no stored result for {missing}"
    relative = STUDY.relative_to(ROOT)  # as the README runs it, from the checkout (the report names its stores)
    result = benchrun("report", str(relative / "results.jsonl"), str(relative / "results-horovod.jsonl"),
                      "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    committed = (STUDY / "report" / "report.md").read_text()
    assert (tmp_path / "report.md").read_text() == committed
    assert "ps x4 batch 32 linear | 3 | 0/3" in committed  # what the study README says it shows

# -- the same network in both frameworks ----------------------------------------------------------


@pytest.mark.slow
def test_smallcnn_starts_from_the_same_weights_in_both_frameworks():
    script = """
import json, os, sys
import numpy as np, torch
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
from benchmarks.frameworks.torch_backend import build_model
from benchmarks.frameworks import keras_models
x = np.random.default_rng(0).standard_normal((4, 28, 28, 3)).astype(np.float32)
net = build_model("smallcnn", 10, False, 28, 5)
keras_net = keras_models.build("smallcnn", (28, 28, 3), 10, False, 5)
out = {}
for training in (False, True):
    net.train(training)
    a = net(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).detach().numpy()
    b = np.asarray(keras_net(x, training=training))
    out[str(training)] = [float(np.abs(a - b).max()), float(np.abs(a).max())]
out["parameters"] = [sum(p.numel() for p in net.parameters()), int(sum(np.prod(v.shape) for v in keras_net.trainable_variables))]
print(json.dumps(out))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for training in ("False", "True"):  # inference (running statistics) and training (batch statistics)
        difference, scale = out[training]
        assert difference < 1e-4 * max(scale, 1.0), out
    assert out["parameters"][0] == out["parameters"][1] == 422_314


# -- real runs ------------------------------------------------------------------------------------


RECORDS: dict[str, dict] = {}  # the real runs' records, for the report test at the end of this module


def accuracy_record(result, name: str) -> dict:
    assert result.returncode == 0, result.stderr[-4000:]
    record = validate_record(last_json_line(result.stdout))
    assert record["status"] == "ok" and record["config"]["target_accuracy"] is not None
    RECORDS[name] = record
    return record


def assert_converged_honestly(section: dict, workers: int, val_images: int = 1000) -> None:
    curve = section["curve"]
    assert section["outcome"] == "converged" and section["best_accuracy"] >= section["target"]
    assert section["samples_to_target"] == curve[-1]["samples"]  # stopped at the first evaluation at the target
    assert all(p["val_accuracy"] < section["target"] for p in curve[:-1])
    assert [p["samples"] for p in curve] == sorted(p["samples"] for p in curve)
    assert all(p["samples"] % section["lr"]["per_update_batch"] == 0 for p in curve)
    assert section["lr"]["global_batch"] == 32 * workers
    assert section["time_to_target_s"] == curve[-1]["wall_time_s"] <= section["run_time_s"]
    assert 0 < section["eval_time_s"] < section["run_time_s"] and section["init_time_s"] > 0
    assert section["dataset"]["val_images"] == val_images and section["dataset"]["name"] == "fashion-mnist"


@pytest.mark.slow
def test_torch_single_rank_reaches_target_with_mllog_and_tensorboard(fashion_mnist, tmp_path):
    result = bench("--framework", "torch", *FAST, "--target-accuracy", "0.7", "--mllog", "--tensorboard", str(tmp_path / "tb"))
    record = accuracy_record(result, "torch-1")
    section = record["accuracy"]
    assert_converged_honestly(section, 1)
    assert section["best_accuracy"] >= 0.7  # chance is 0.1
    keys = [json.loads(line.split(" ", 1)[1])["key"] for line in result.stderr.splitlines() if line.startswith(":::MLLOG ")]
    assert keys.count("eval_accuracy") == len(section["curve"]) and keys[-1] == "run_stop"
    assert keys.index("init_stop") < keys.index("run_start") < keys.index("eval_accuracy")
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_tf_single_rank_reaches_target(fashion_mnist):
    result = bench("--framework", "tf", *FAST, "--target-accuracy", "0.7")
    record = accuracy_record(result, "tf-1")
    assert_converged_honestly(record["accuracy"], 1)
    assert record["world"]["strategy"] == "none" and record["world"]["workers"] == 1


@pytest.mark.slow
def test_torch_ddp_four_ranks_reach_target_in_sync(fashion_mnist):
    result = benchrun("launch", "--launcher", "local", "-n", "4", "--", "--framework", "torch", "--strategy", "ddp", *FAST,
                      "--target-accuracy", "0.7", "--lr-rule", "linear", "--warmup-epochs", "0.01")
    record = accuracy_record(result, "torch-ddp-4")
    assert_converged_honestly(record["accuracy"], 4)
    assert record["replicas"]["in_sync"] and record["world"]["workers"] == 4
    assert record["accuracy"]["lr"]["peak_lr"] == pytest.approx(0.08)  # linear: x 128 / 32


@pytest.mark.slow
def test_torchrun_ddp_two_ranks_reach_target_in_sync(fashion_mnist):
    """A launcher of its own (torchrun's elastic agent) starting the ranks: the same run, the same stop."""
    result = benchrun("launch", "--launcher", "torchrun", "-n", "2", "--", "--framework", "torch", "--strategy", "ddp",
                      *FAST, "--target-accuracy", "0.7")
    record = accuracy_record(result, "torch-ddp-2-torchrun")
    assert_converged_honestly(record["accuracy"], 2)
    assert record["world"]["launcher"] == "torchrun" and record["world"]["workers"] == 2 and record["replicas"]["in_sync"]


@pytest.mark.slow
def test_tf_allreduce_two_ranks_reach_target_with_lars(fashion_mnist):
    """Evaluations every 256 samples: several of them, each gathered afresh from both ranks (a stale gather
    split the ranks' stop decisions and hung them)."""
    result = benchrun("launch", "--launcher", "local", "-n", "2", "--", "--framework", "tf", "--strategy", "allreduce",
                      *FAST, "--eval-every", "256", "--target-accuracy", "0.7", "--lr-rule", "lars")
    record = accuracy_record(result, "tf-allreduce-2")
    assert_converged_honestly(record["accuracy"], 2)
    assert len(record["accuracy"]["curve"]) >= 3
    assert record["replicas"]["in_sync"] and record["accuracy"]["lr"]["lars_eta"] == lr_rules.LARS_ETA


@pytest.mark.slow
def test_torch_fsdp_two_ranks_reach_target_with_uneven_validation_shards(fashion_mnist):
    """Sharded parameters make every evaluation pass a collective: both ranks must run as many. 1001
    images are shards of 501 and 500, which were 2 and 1 passes and hung the ranks until --timeout.
    LARS takes the norms of sharded parameters."""
    fast = [*FAST[:FAST.index("--val-images")], "--val-images", "1001", *FAST[FAST.index("--val-images") + 2:]]
    result = benchrun("launch", "--launcher", "local", "-n", "2", "--", "--framework", "torch", "--strategy", "fsdp",
                      *fast, "--target-accuracy", "0.7", "--lr-rule", "lars", "--timeout", "240")
    record = accuracy_record(result, "torch-fsdp-2")
    assert_converged_honestly(record["accuracy"], 2, val_images=1001)
    assert record["world"]["strategy"] == "fsdp" and record["replicas"]["in_sync"]


@pytest.mark.slow
def test_random_labels_stay_at_chance(tmp_path):
    """The negative control: `bench make-dataset` labels carry no information about the pixels."""
    made = bench("make-dataset", str(tmp_path / "random"), "--images", "480", "--classes", "4", "--min-size", "32",
                 "--max-size", "40")
    assert made.returncode == 0, made.stderr
    result = bench("--framework", "torch", "--model", "smallcnn", "--image-size", "32", "--data-dir", str(tmp_path / "random"),
                   "--batch-size", "16", "--target-accuracy", "0.9", "--val-fraction", "0.25", "--eval-every", "192",
                   "--max-epochs", "2", "--num-threads", "1", "--json")
    section = accuracy_record(result, "random-labels")["accuracy"]
    assert section["outcome"] == "not_converged" and section["samples_to_target"] is None
    assert section["dataset"]["name"] == "imagefolder" and section["dataset"]["classes"] == 4
    val = section["dataset"]["val_images"]
    assert 80 < val < 160  # a quarter of 480, by the hash of each path
    # chance is 0.25; five sigma of a binomial proportion over the validation images above it fails
    assert section["best_accuracy"] < 0.25 + 5 * math.sqrt(0.25 * 0.75 / val), section["curve"]
    assert section["curve"][-1]["epoch"] == pytest.approx(2.0, abs=0.1)


@pytest.mark.slow
def test_a_throughput_model_trains_and_evaluates_in_accuracy_mode(fashion_mnist):
    """docs/accuracy.md: the five throughput models run to a target too. ResNet-50 at its smallest size
    (Fashion-MNIST zero-padded to 32 px, grey to RGB) on a tiny budget: two evaluations, then not_converged."""
    result = bench("--framework", "torch", "--model", "resnet50", "--image-size", "32", "--batch-size", "16",
                   "--eval-every", "128", "--max-epochs", "0.004", "--val-images", "200", "--target-accuracy", "0.99",
                   "--num-threads", "1", "--json")
    record = accuracy_record(result, "resnet50-tiny")
    section = record["accuracy"]
    assert record["config"]["model"] == "resnet50" and section["outcome"] == "not_converged"
    assert [p["samples"] for p in section["curve"]] == [128, 240]  # every 128, and the budget's end (0.004 epoch)
    assert all(0 <= p["val_accuracy"] <= 1 and math.isfinite(p["val_loss"]) for p in section["curve"])
    assert section["dataset"]["val_images"] == 200
    assert section["dataset"]["preprocessing"].startswith("zero-padded 28->32 px, grey->RGB")


# -- scoring arms for reports (runners/accuracy.py) -----------------------------------------------


def arm(workers, runs, images_per_sec=100.0):
    """An arm whose runs are (samples to target or None, best accuracy)."""
    from runners import accuracy

    records = [{"accuracy": {"outcome": "converged" if samples else "not_converged", "samples_to_target": samples,
                             "time_to_target_s": samples / images_per_sec if samples else None, "best_accuracy": best,
                             "train_images_per_sec": images_per_sec}, "run_id": f"{workers:08d}{i}"}
               for i, (samples, best) in enumerate(runs)]
    return accuracy.Arm({"framework": "torch", "model": "smallcnn", "strategy": "ddp", "workers": workers,
                         "batch_size": 32}, "none", 0.8, records, ())


def scored(candidate, reference):
    from runners import accuracy

    candidate.reference = reference
    candidate.flags = accuracy.flags(candidate)
    return candidate


def test_speedup_splits_into_statistical_and_hardware_efficiency():
    reference = arm(1, [(1000, 0.85)] * 3, images_per_sec=100.0)
    four = scored(arm(4, [(2000, 0.85)] * 3, images_per_sec=350.0), reference)
    assert four.statistical_efficiency == pytest.approx(0.5) and four.hardware_efficiency == pytest.approx(3.5)
    assert four.speedup == pytest.approx(1.75) == pytest.approx(four.statistical_efficiency * four.hardware_efficiency)
    assert four.flags == []


def test_olympic_scoring_drops_one_failed_run_of_five():
    runs = [(1000, 0.85), (1100, 0.85), (900, 0.85), (1050, 0.85), (None, 0.79)]
    assert arm(1, runs).samples_to_target == pytest.approx((1000 + 1100 + 1050) / 3)
    assert math.isinf(arm(1, runs[:4] + [(None, 0.79)] * 2).samples_to_target)  # two failures: not scored


def test_fast_but_wrong_flag():
    from runners import accuracy

    reference = arm(1, [(1000, 0.850), (1000, 0.852), (1000, 0.848)])
    wrong = scored(arm(8, [(None, 0.70), (None, 0.71), (None, 0.69)], images_per_sec=700.0), reference)
    assert accuracy.FAST_BUT_WRONG in wrong.flags
    sentence = accuracy.verdict(wrong)
    assert "FAST BUT WRONG" in sentence and "0 of 3 runs" in sentence and "target was not reached" in sentence
    within = scored(arm(8, [(1000, 0.849), (1000, 0.851), (1000, 0.850)], images_per_sec=700.0), reference)
    assert within.flags == []  # as accurate, within the seed spread
    slower = scored(arm(8, [(None, 0.70)] * 3, images_per_sec=50.0), reference)
    assert accuracy.FAST_BUT_WRONG not in slower.flags  # wrong, but not faster: no win to distrust


def test_suspiciously_fast_flag():
    from runners import accuracy

    reference = arm(1, [(1000, 0.85), (1040, 0.85), (960, 0.85)])
    fast = scored(arm(4, [(500, 0.85), (520, 0.85), (480, 0.85)], images_per_sec=300.0), reference)
    assert accuracy.SUSPICIOUSLY_FAST in fast.flags and "SUSPICIOUSLY FAST" in accuracy.verdict(fast)
    usual = scored(arm(4, [(1000, 0.85), (1100, 0.85), (1050, 0.85)], images_per_sec=300.0), reference)
    assert usual.flags == []
    alone = scored(arm(4, [(500, 0.85)], images_per_sec=300.0), reference)
    assert accuracy.SUSPICIOUSLY_FAST not in alone.flags  # one run: no test, no flag
    assert "only 1 seed(s)" in accuracy.verdict(alone)


@pytest.mark.slow
def test_tf_parameter_server_reaches_target_and_records_staleness(fashion_mnist):
    result = benchrun("launch", "--launcher", "local", "-n", "2", "--num-ps", "1", "--", "--framework", "tf",
                      "--strategy", "ps", *FAST, "--target-accuracy", "0.6")
    record = accuracy_record(result, "tf-ps-2")
    section = record["accuracy"]
    assert section["outcome"] == "converged" and section["best_accuracy"] >= 0.6  # stale updates: a lower bar
    lr = section["lr"]
    assert lr["per_update_batch"] == 32 and lr["global_batch"] == 64  # asynchronous: one worker's batch per update
    staleness = lr["staleness"]
    assert staleness["n"] == section["samples_to_target"] // 32 and staleness["min"] >= 0
    assert staleness["max"] >= 1  # two workers updating at once: some updates read weights another then changed
    assert section["curve"][-1]["samples"] % 32 == 0 and record["replicas"]["in_sync"]  # one copy, on the PS
    assert sorted(r["role"] for r in record["ranks"]) == ["worker", "worker"]


@pytest.mark.slow
def test_report_has_the_time_to_accuracy_section(tmp_path):
    """benchrun report on this module's records: the section, its table and one verdict per arm; the
    throughput sections leave accuracy runs out."""
    assert {"torch-1", "torch-ddp-4"} <= set(RECORDS), "the torch runs above must have run first"
    store = tmp_path / "tta.jsonl"
    store.write_text("".join(json.dumps(record) + "\n" for record in RECORDS.values()))
    result = benchrun("report", str(store), "--out", str(tmp_path / "report"))
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "report" / "report.md").read_text()
    section = text.split("## Time to accuracy", 1)[1].split("\n## ", 1)[0]
    assert "statistical eff." in section and "accuracy-1.png" in section
    reference, ddp = RECORDS["torch-1"]["accuracy"], RECORDS["torch-ddp-4"]["accuracy"]
    assert "torch smallcnn none x1 batch 32 none to 0.7: the reference" in section
    expected_speedup = reference["time_to_target_s"] / ddp["time_to_target_s"]
    assert f"ddp x4 batch 32 linear to 0.7: {expected_speedup:.2f}x the reference's speed" in section
    assert (tmp_path / "report" / "accuracy-1.png").stat().st_size > 1000
    batch_section = text.split("## Throughput and memory vs batch size", 1)[1].split("\n## ", 1)[0]
    assert "smallcnn" not in batch_section  # accuracy runs are not throughput runs


@pytest.mark.slow
def test_a_run_in_docker_reads_the_hosts_fashion_mnist(fashion_mnist, dlbench_images, tmp_path):
    """Where the host has Debian's dataset package, benchrun mounts its Fashion-MNIST read-only for a
    time-to-accuracy run in a container and tells bench where (`--fashion-mnist-dir /data`)."""
    result = benchrun("run", "--runtime", "docker", "--results", str(tmp_path), "--", "--framework", "torch",
                      *[arg for arg in FAST if arg != "--json"], "--target-accuracy", "0.7", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    record = validate_record(json.loads((tmp_path / "records.jsonl").read_text().splitlines()[-1]))
    assert record["provenance"]["requested_runtime"] == "docker" and record["config"]["fashion_mnist_dir"] == "/data"
    assert_converged_honestly(record["accuracy"], 1)


@pytest.mark.slow
def test_the_image_trains_to_target_on_its_own_fashion_mnist_with_mllog(dlbench_images):
    """`docker run IMAGE --target-accuracy ...`, no mount: the image's own Fashion-MNIST (its late layer), and
    MLLOG lines written by the image's mlperf-logging (the calling file and line in their metadata)."""
    result = run(["docker", "run", "--rm", "--network", "none", dlbench_images["torch"], *FAST, "--target-accuracy", "0.7",
                  "--mllog"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    record = validate_record(last_json_line(result.stdout))
    assert record["config"]["fashion_mnist_dir"] == "/usr/share/datasets/fashion-mnist"
    assert_converged_honestly(record["accuracy"], 1)
    events = [json.loads(line.split(" ", 1)[1]) for line in result.stderr.splitlines() if line.startswith(":::MLLOG ")]
    accuracy = [e for e in events if e["key"] == "eval_accuracy"]
    assert len(accuracy) == len(record["accuracy"]["curve"]) and events[-1]["key"] == "run_stop"
    assert accuracy[-1]["metadata"]["file"] == "benchmarks/run/accuracy.py" and accuracy[-1]["metadata"]["lineno"] > 0
