"""ImageFolder trees (DIR/<class>/<image>.jpg): the --data-dir checks, the listing tf.data
reads, and `bench make-dataset`, a small tree of real JPEGs so the real-data path (decode,
crop, flip, batching) is exercised without downloading ImageNet.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .errors import UsageError, choices

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
    """Write `images` JPEGs spread over `classes` directories; all-or-nothing."""
    import numpy as np
    from PIL import Image

    if images <= 0 or classes <= 0:
        raise UsageError("--images and --classes must be positive integers")
    if classes > images:
        raise UsageError(f"--classes {classes} exceeds --images {images}: every class needs an image")
    if not 16 <= min_size <= max_size:
        raise UsageError(f"need 16 <= --min-size <= --max-size, got {min_size} and {max_size}")
    target = Path(root)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{str(root)!r} exists and is not an empty directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    staging = Path(tempfile.mkdtemp(prefix=".make-dataset-", dir=target.parent))
    try:
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
        if target.exists():
            target.rmdir()
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
