"""A --data-dir with undecodable files (as real ImageNet has): skipped, counted, named."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks.data.dataset import image_folder, image_problem, scan_images
from benchmarks.results.record import SCHEMA_VERSION
from infra.helpers import bench, last_json_line, validate_record

RUN = ["--model", "alexnet", "--image-size", "64", "--batch-size", "2", "--num-warmup-batches", "1",
       "--num-batches", "4", "--num-threads", "2", "--num-data-workers", "1", "--json"]


def _jpeg(rng, mode: str = "RGB") -> bytes:
    from PIL import Image

    pixels = rng.integers(0, 256, size=(48, 40, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, format="JPEG", quality=85)
    return buffer.getvalue()


def _png(rng) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, size=(40, 48, 3), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def write_bad_files(directory: Path, rng) -> dict[str, bytes]:
    """The kinds ImageNet has, and worse. Returns name -> bytes, good ones included."""
    good = _jpeg(rng)
    files = {
        "cmyk.jpg": _jpeg(rng, "CMYK"),  # decodable by both frameworks: kept
        "png_named.jpg": _png(rng),  # PNG inside a .jpg: both decoders sniff the format: kept
        "truncated.jpg": good[: len(good) // 2],
        "garbage.jpg": b"this is not an image " * 20,
        "empty.jpg": b"",
        # complete markers around a corrupt body: passes the scan, fails only when decoded
        "corrupt_body.jpg": b"\xff\xd8\xff\xe0" + bytes(rng.integers(0, 256, 600, dtype=np.uint8)) + b"\xff\xd9",
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return files


SCANNED_BAD = {"truncated.jpg", "garbage.jpg", "empty.jpg"}


def good_tree(root: Path, rng, classes: int = 2, per_class: int = 3) -> Path:
    """root/class_C/good_I.jpg, all decodable."""
    for c in range(classes):
        (root / f"class_{c}").mkdir(parents=True)
        for i in range(per_class):
            (root / f"class_{c}" / f"good_{i}.jpg").write_bytes(_jpeg(rng))
    return root


@pytest.fixture
def corrupt_dir(tmp_path) -> Path:
    rng = np.random.default_rng(0)
    root = good_tree(tmp_path / "data", rng)
    write_bad_files(root / "class_1", rng)
    return root


def test_the_scan_names_truncated_garbage_and_empty_files(corrupt_dir):
    scan = scan_images(corrupt_dir)
    assert {Path(p).name for p, _ in scan.bad} == SCANNED_BAD
    reasons = {Path(p).name: why for p, why in scan.bad}
    assert reasons["truncated.jpg"] == "truncated JPEG (no end marker)"
    assert reasons["garbage.jpg"] == "not an image (unknown format)"
    assert reasons["empty.jpg"] == "empty file"
    assert {"cmyk.jpg", "png_named.jpg", "corrupt_body.jpg"} <= {Path(p).name for p in scan.paths}
    assert image_problem(corrupt_dir / "missing.jpg").startswith("cannot be read")


def _check_record(result, framework: str) -> dict:
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    record = validate_record(last_json_line(result.stdout))
    assert record["status"] == "ok" and record["schema_version"] == SCHEMA_VERSION
    data = record["data"]
    assert data["images"] == 12
    names = [Path(item["path"]).name for item in data["skipped_examples"]]
    assert SCANNED_BAD <= set(names)
    assert data["skipped_images"] == len(names)
    assert "skipping 3 of 12 images" in result.stderr  # said before the run
    assert f"data: 12 images, {data['skipped_images']} skipped as undecodable" in result.stderr  # the human table
    return record


def test_torch_skips_and_counts_undecodable_images(corrupt_dir):
    # batches of 3 over the 9 files that pass the scan: every one is read in the first epoch, so
    # the corrupt body is met, and skipped, while decoding
    # the corrupt body is met, and skipped, while decoding; 9 steps read the 9 files three times over, and
    # a file that fails each epoch is one skipped image, not three
    result = bench("--framework", "torch", *RUN, "--batch-size", "3", "--num-batches", "8", "--data-dir", str(corrupt_dir),
                   timeout=300)
    record = _check_record(result, "torch")
    names = [Path(item["path"]).name for item in record["data"]["skipped_examples"]]
    assert "corrupt_body.jpg" in names and "cmyk.jpg" not in names and "png_named.jpg" not in names
    assert record["data"]["skipped_images"] == 4 and len(set(names)) == len(names)
    reason = next(i["reason"] for i in record["data"]["skipped_examples"] if i["path"].endswith("corrupt_body.jpg"))
    assert reason.startswith("cannot be decoded")


@pytest.mark.slow
def test_tensorflow_skips_undecodable_images(corrupt_dir):
    result = bench("--framework", "tensorflow", *RUN, "--data-dir", str(corrupt_dir), timeout=300)
    _check_record(result, "tensorflow")


def test_strict_data_stops_at_the_first_bad_file(corrupt_dir, tmp_path):
    out = tmp_path / "out.jsonl"
    result = bench("--framework", "torch", *RUN, "--data-dir", str(corrupt_dir), "--strict-data",
                   "--output", str(out), timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench: error: --strict-data: ")
    assert "empty.jpg: empty file" in lines[0]  # the first bad file in ImageFolder order
    assert not out.exists() and result.stdout == ""


def test_a_data_dir_of_only_bad_files_is_one_line_before_the_run(tmp_path):
    root = tmp_path / "bad"
    (root / "class_0").mkdir(parents=True)
    rng = np.random.default_rng(1)
    files = write_bad_files(root / "class_0", rng)
    for name in set(files) - SCANNED_BAD:
        (root / "class_0" / name).unlink()
    result = bench("--framework", "torch", *RUN, "--data-dir", str(root), timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "none of its 3 images can be decoded (first: " in lines[0], lines
    assert "building" not in result.stderr


def test_a_png_claiming_a_huge_size_is_skipped_by_the_scan_and_counted(tmp_path):
    """A decompression bomb (a PNG whose header claims 50000 x 50000 px) is set apart before the run:
    Pillow would refuse it with an error of its own (before, exit 1), TensorFlow would try to allocate
    it. A run on a data dir holding one ends ok, the bomb counted once and named, no traceback; the
    scan is bench's own, before either framework (both leave out what it set apart), so torch runs it."""
    data = bytearray(_png(np.random.default_rng(2)))
    data[16:24] = (50000).to_bytes(4, "big") * 2
    (tmp_path / "bomb.png").write_bytes(bytes(data))
    assert image_problem(tmp_path / "bomb.png") == ("PNG claims 2,500,000,000 pixels (a decompression bomb: over "
                                                    "178,956,970)")
    (tmp_path / "fine.png").write_bytes(_png(np.random.default_rng(3)))
    assert image_problem(tmp_path / "fine.png") is None
    root = good_tree(tmp_path / "data", np.random.default_rng(4))
    shutil.copy(tmp_path / "bomb.png", root / "class_0" / "bomb.png")
    result = bench("--framework", "torch", *RUN, "--data-dir", str(root), timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    record = validate_record(last_json_line(result.stdout))
    assert record["status"] == "ok" and (record["data"]["images"], record["data"]["skipped_images"]) == (7, 1)
    (skipped,) = record["data"]["skipped_examples"]
    assert skipped["path"].endswith("bomb.png") and "decompression bomb" in skipped["reason"]


def test_directory_links_back_up_do_not_make_the_listing_endless(tmp_path):
    """`cls0/up -> ..` and `cls1/up -> ..`: torchvision's own listing followed them for ever; bench lists
    DIR/<class>/<image> only, as the scan does: a torch run ends ok, and TensorFlow's path list
    (dataset.image_folder, the same listing) is checked here without a run."""
    root = good_tree(tmp_path / "data", np.random.default_rng(4))
    for c in range(2):
        (root / f"class_{c}" / "up").symlink_to("..")
    paths, labels, classes = image_folder(root)
    assert (len(paths), labels, classes) == (6, [0, 0, 0, 1, 1, 1], ["class_0", "class_1"])
    result = bench("--framework", "torch", *RUN, "--data-dir", str(root), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    record = validate_record(last_json_line(result.stdout))
    assert record["status"] == "ok" and record["data"]["images"] == 6


def test_no_decodable_image_is_named_in_the_record(tmp_path):
    """Every file passes the scan but none decodes: the record and the one line give the cause, not
    torch's "Caught ValueError in DataLoader worker process 0"."""
    rng = np.random.default_rng(5)
    root = tmp_path / "data"
    (root / "cls0").mkdir(parents=True)
    for i in range(3):
        body = b"\xff\xd8\xff\xe0" + bytes(rng.integers(0, 256, 600, dtype=np.uint8)) + b"\xff\xd9"
        (root / "cls0" / f"corrupt{i}.jpg").write_bytes(body)
    result = bench("--framework", "torch", *RUN, "--data-dir", str(root), timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    record = validate_record(last_json_line(result.stdout))
    assert record["status"] == "failed"
    message = record["error"]["message"]
    assert "images in a row cannot be decoded" in message and "Caught" not in message, message
    assert "Traceback" not in result.stderr
