"""ImageFolder trees (DIR/<class>/<image>.jpg): the --data-dir checks, the listing tf.data
reads, and `bench make-dataset`, a small tree of real JPEGs so the real-data path (decode,
crop, flip, batching) is exercised without downloading ImageNet.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UsageError, choices

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


def validate_data_dir(path: str | os.PathLike) -> Path:
    """An ImageFolder tree: one sub-directory per class, at least one image somewhere."""
    root = Path(path)
    if not root.exists():
        raise UsageError(f"--data-dir {str(path)!r} does not exist")
    if not root.is_dir():
        raise UsageError(f"--data-dir {str(path)!r} is not a directory")
    classes = list_classes(root)
    if not classes:
        raise UsageError(
            f"--data-dir {str(path)!r} has no class sub-directories (expected DIR/<class>/<image>.jpg; "
            "make one with `bench make-dataset DIR`)"
        )
    if not any(list_images(root / c) for c in classes):
        raise UsageError(
            f"--data-dir {str(path)!r} has no images with extensions {choices(IMAGE_EXTENSIONS)}"
        )
    return root.resolve()


def list_classes(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def list_images(class_dir: Path) -> list[Path]:
    return sorted(p for p in class_dir.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file())


def image_folder(root: str | os.PathLike) -> tuple[list[str], list[int], list[str]]:
    """(paths, labels, class names) in torchvision ImageFolder order, for tf.data."""
    root = Path(root)
    classes = list_classes(root)
    paths, labels = [], []
    for label, name in enumerate(classes):
        for image in list_images(root / name):
            paths.append(str(image))
            labels.append(label)
    return paths, labels, classes


def make_dataset(
    root: str | os.PathLike,
    images: int,
    classes: int,
    min_size: int = 160,
    max_size: int = 320,
    seed: int = 0,
) -> Path:
    """Write `images` JPEGs spread over `classes` directories; all-or-nothing (durable.staged_dir): a file
    system that fills up on the way is durable.NoRoom, one line, with nothing left behind."""
    from ..core.durable import staged_dir

    if images <= 0 or classes <= 0:
        raise UsageError("--images and --classes must be positive integers")
    if classes > images:
        raise UsageError(f"--classes {classes} exceeds --images {images}: every class needs an image")
    if not 16 <= min_size <= max_size:
        raise UsageError(f"need 16 <= --min-size <= --max-size, got {min_size} and {max_size}")
    target = Path(root)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{str(root)!r} exists and is not an empty directory")
    with staged_dir(target, f"make-dataset {str(root)!r}") as staged:
        staged.progress = f"after 0 of {images} images; "
        for written in _write_images(staged.path, images, classes, min_size, max_size, seed):
            staged.progress = f"after {written} of {images} images; "
    return target


def _write_images(staging: Path, images: int, classes: int, min_size: int, max_size: int, seed: int):
    """Write the images one by one, yielding how many are written so far."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for index in range(images):
        label = index % classes
        class_dir = staging / f"class_{label:04d}"
        class_dir.mkdir(exist_ok=True)
        height, width = rng.integers(min_size, max_size + 1, size=2)
        # Smooth colour field plus noise: compresses and decodes like a photo, not like flat colour.
        base = rng.integers(0, 256, size=(4, 4, 3)).astype(np.uint8)
        field = np.asarray(Image.fromarray(base).resize((int(width), int(height)), Image.BILINEAR), dtype=np.int16)
        noise = rng.integers(-24, 25, size=field.shape, dtype=np.int16)
        pixels = np.clip(field + noise, 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(class_dir / f"img_{index:06d}.jpg", quality=90)
        yield index + 1


# -- undecodable files in a --data-dir ------------------------------------------------------------

SKIPPED_EXAMPLES = 10  # paths of skipped images kept in the record
_SIGNATURES = {  # format: (leading bytes, what a complete file ends with, or None)
    "jpeg": (b"\xff\xd8\xff", b"\xff\xd9"),
    "png": (b"\x89PNG\r\n\x1a\n", b"IEND\xaeB`\x82"),
    "gif": (b"GIF8", b";"),
    "bmp": (b"BM", None),
}
_TAIL_BYTES = 64  # JPEG end-of-image may be followed by a little padding
MAX_PIXELS = 2 * 89_478_485  # Pillow refuses images larger than this as decompression bombs


def _png_pixels(head: bytes) -> int | None:
    """Width × height from a PNG's IHDR chunk (bytes 16-24), None if it is not there."""
    if len(head) < 24 or head[12:16] != b"IHDR":
        return None
    return int.from_bytes(head[16:20], "big") * int.from_bytes(head[20:24], "big")


def image_problem(path: str | os.PathLike) -> str | None:
    """Why a file cannot be a complete image (unreadable, empty, unknown format, truncated), or None.

    A structural check (magic bytes, the format's end marker), reading ~100 bytes per file, so
    a whole ImageNet tree is checked in seconds; the format is sniffed, not taken from the
    extension (a PNG named .jpg is fine: both decoders sniff too).
    """
    try:
        with open(path, "rb") as f:
            head = f.read(24)
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - _TAIL_BYTES))
            tail = f.read()
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    if not head:
        return "empty file"
    for name, (magic, end) in _SIGNATURES.items():
        if head.startswith(magic):
            if end is not None and end not in tail:
                return f"truncated {name.upper()} (no end marker)"
            pixels = _png_pixels(head) if name == "png" else None
            if pixels is not None and pixels > MAX_PIXELS:
                return f"PNG claims {pixels:,} pixels (a decompression bomb: over {MAX_PIXELS:,})"
            return None
    return "not an image (unknown format)"


@dataclass
class ImageScan:
    """An ImageFolder tree with its undecodable files set apart, in torchvision's order."""

    paths: list[str]
    labels: list[int]
    classes: list[str]
    bad: list[tuple[str, str]]  # (path, why), in file order

    def summary(self) -> dict:
        return {"images": len(self.paths) + len(self.bad), "skipped": [list(item) for item in self.bad]}


def scan_images(root: str | os.PathLike, threads: int = 16) -> ImageScan:
    from concurrent.futures import ThreadPoolExecutor

    paths, labels, classes = image_folder(root)
    with ThreadPoolExecutor(max_workers=threads) as pool:  # I/O bound: threads overlap the reads
        problems = list(pool.map(image_problem, paths))
    good = [index for index, problem in enumerate(problems) if problem is None]
    bad = [(path, problem) for path, problem in zip(paths, problems) if problem is not None]
    return ImageScan([paths[i] for i in good], [labels[i] for i in good], classes, bad)


def check_images(root: str | os.PathLike, strict: bool) -> ImageScan:
    """Scan a --data-dir; a one-line UsageError when every file is bad, or any is under --strict-data."""
    scan = scan_images(root)
    if scan.bad and strict:
        path, why = scan.bad[0]
        raise UsageError(f"--strict-data: {path}: {why} ({len(scan.bad)} bad of {len(scan.bad) + len(scan.paths)} images)")
    if not scan.paths:
        path, why = scan.bad[0]
        raise UsageError(f"--data-dir {str(root)!r}: none of its {len(scan.bad)} images can be decoded (first: {path}: {why})")
    return scan


def skipped_section(scan_summary: dict | None, decode_failures: list[tuple[str, str]]) -> dict | None:
    """The record's `data` section: images found, how many were skipped, the first few and why."""
    if scan_summary is None:
        return None
    first_reason: dict[str, str] = {}  # a file that fails only when decoded fails every epoch: count it once
    for path, why in [tuple(item) for item in scan_summary["skipped"]] + list(decode_failures):
        first_reason.setdefault(path, why)
    skipped = list(first_reason.items())
    return {
        "images": scan_summary["images"],
        "skipped_images": len(skipped),
        "skipped_examples": [{"path": path, "reason": why} for path, why in skipped[:SKIPPED_EXAMPLES]],
    }
