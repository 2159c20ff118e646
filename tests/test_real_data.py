"""--data-dir goes through each framework's own input pipeline; make-dataset makes the tree."""

from pathlib import Path

import pytest

from infra.helpers import SMALL, bench, last_json_line, validate_record


def test_make_dataset_writes_an_imagefolder(tmp_path):
    from PIL import Image

    root = tmp_path / "data"
    result = bench("make-dataset", str(root), "--images", "10", "--classes", "3", "--min-size", "40", "--max-size", "60")
    assert result.returncode == 0, result.stderr
    classes = sorted(p.name for p in root.iterdir())
    assert classes == ["class_0000", "class_0001", "class_0002"]
    images = sorted(root.glob("*/*.jpg"))
    assert len(images) == 10
    with Image.open(images[0]) as image:
        assert image.format == "JPEG" and 40 <= min(image.size) and max(image.size) <= 60


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--images", "2", "--classes", "3"], "--classes 3 exceeds --images 2"),
        (["--images", "0"], "--images and --classes must be positive"),
        (["--min-size", "100", "--max-size", "50"], "need 16 <= --min-size <= --max-size"),
    ],
)
def test_make_dataset_bad_input_writes_nothing(tmp_path, args, expected):
    root = tmp_path / "data"
    result = bench("make-dataset", str(root), *args)
    assert result.returncode == 2 and expected in result.stderr
    assert not root.exists() and list(tmp_path.iterdir()) == []


def test_make_dataset_refuses_a_non_empty_dir(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    result = bench("make-dataset", str(tmp_path), "--images", "2", "--classes", "1")
    assert result.returncode == 2 and "is not an empty directory" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_real_data_path_records_input_wait(framework, dataset_dir: Path):
    result = bench(
        "--framework", framework, "--model", "alexnet", "--image-size", "64", *SMALL,
        "--data-dir", str(dataset_dir), "--json",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = validate_record(last_json_line(result.stdout))
    assert record["status"] == "ok"
    assert record["config"]["data"] == "real" and record["config"]["data_dir"] == str(dataset_dir.resolve())
    waits = record["input_wait_s"]
    assert waits["n"] == 2 and waits["min"] >= 0
    repeat = record["repeats"][0]
    assert 0 <= repeat["input_wait_fraction"] < 1
    assert repeat["input_wait_fraction"] == pytest.approx(waits["mean"] * 2 / repeat["wall_time_s"])
