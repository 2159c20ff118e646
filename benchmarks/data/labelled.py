"""Labelled train and validation data for time-to-accuracy runs (bench --target-accuracy):
Fashion-MNIST from Debian's IDX files, or an ImageFolder with a held-out split (docs/accuracy.md, "Data").

Framework-neutral on purpose: both frameworks (and every strategy) read the same images in the same
order, shard them the same way and see the same pixels, so a difference in accuracy is the training's,
not the input pipeline's.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from ..core.errors import UsageError
from .fashion_mnist import FASHION_MNIST_CLASSES, FASHION_MNIST_FILES, FASHION_MNIST_PACKAGE, FASHION_MNIST_STATS

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PAD_LIMIT = 1.25  # up to this ratio of target to native size images are zero-padded; beyond, resized

IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
             0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def _idx_header(head: bytes, path) -> tuple[np.dtype, tuple[int, ...]]:
    """The dtype and shape an IDX file's header declares (one-line UsageError when it is not IDX)."""
    if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in IDX_TYPES:
        raise UsageError(f"{path}: not an IDX file (bad magic number)")
    ndim = head[3]
    if len(head) < 4 + 4 * ndim:
        raise UsageError(f"{path}: IDX header truncated")
    return np.dtype(IDX_TYPES[head[2]]), struct.unpack(f">{ndim}I", head[4:4 + 4 * ndim])


def _promised(dtype: np.dtype, shape: tuple[int, ...]) -> int:
    return int(np.prod(shape)) * dtype.itemsize


def read_idx(path: str | Path) -> np.ndarray:
    """An IDX file (LeCun's MNIST format), gzip-compressed or not, as an array."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as error:
        raise UsageError(f"{path}: cannot be read ({error})") from None
    dtype, shape = _idx_header(data, path)
    header, promised = 4 + 4 * len(shape), _promised(dtype, shape)
    if len(data) - header != promised:
        raise UsageError(f"{path}: IDX data has {len(data) - header} bytes, its header promises {promised}")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)


def idx_shape(path: str | Path) -> tuple[int, ...]:
    """The shape of an IDX file whose data is all there, read through once in chunks (memory stays small):
    a cut gzip stream (a truncated download) or data shorter or longer than its header says is one line."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            head = f.read(4)
            head += f.read(4 * head[3]) if len(head) == 4 else b""
            dtype, shape = _idx_header(head, path)
            size = 0
            while chunk := f.read(1 << 20):
                size += len(chunk)
    except (OSError, EOFError, zlib.error) as error:
        raise UsageError(f"{path}: cannot be read ({error})") from None
    if size != _promised(dtype, shape):
        raise UsageError(f"{path}: IDX data has {size} bytes, its header promises {_promised(dtype, shape)}")
    return shape


def check_fashion_mnist(directory: str | Path) -> Path:
    """The directory holding the four Fashion-MNIST files, or a one-line UsageError naming the fix."""
    root = Path(directory)
    missing = [name for pair in FASHION_MNIST_FILES.values() for name in pair if not (root / name).is_file()]
    if missing:
        what = "does not exist" if not root.exists() else f"lacks {', '.join(missing)}"
        raise UsageError(f"--fashion-mnist-dir {str(directory)!r} {what} (install Debian's {FASHION_MNIST_PACKAGE}: "
                         f"apt-get install {FASHION_MNIST_PACKAGE}; or pass the directory holding its four .gz IDX files; "
                         "or --data-dir for an ImageFolder)")
    return root.resolve()


def check_fashion_mnist_files(directory: str | Path) -> int:
    """The four files read through before anything is built (a second or so for Fashion-MNIST's 30 MB): a
    truncated, mismatched or foreign file is one line up front, not an error after the model is built.
    Returns the number of training images."""
    root = check_fashion_mnist(directory)
    counts = {}
    for split_name, (images, labels) in FASHION_MNIST_FILES.items():
        image_shape, label_shape = idx_shape(root / images), idx_shape(root / labels)
        counts[split_name] = image_shape[0]
        if len(image_shape) != 3 or image_shape[1:] != (28, 28):
            raise UsageError(f"{root / images}: holds images of shape {image_shape}, not N x 28 x 28 (Fashion-MNIST's)")
        if len(label_shape) != 1 or label_shape[0] != image_shape[0]:
            raise UsageError(f"{root / labels}: holds labels of shape {label_shape} for the {image_shape[0]} images of "
                             f"{root / images}: one label per image")
        top = int(read_idx(root / labels).max(initial=0))
        if top >= FASHION_MNIST_CLASSES:
            raise UsageError(f"{root / labels}: a label {top} is past Fashion-MNIST's {FASHION_MNIST_CLASSES} classes")
    return counts["train"]


class ArraySource:
    """Images decoded up front (uint8 N x H x W x C)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        if len(images) != len(labels):
            raise UsageError(f"{len(images)} images but {len(labels)} labels")
        self.images, self.labels = images, labels.astype(np.int64)

    def __len__(self) -> int:
        return len(self.labels)

    def get(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.images[indices], self.labels[indices]

    def head(self, count: int) -> "ArraySource":
        return ArraySource(self.images[:count], self.labels[:count])


class FileSource:
    """Image files decoded on demand to RGB at one size (PIL, bilinear), in a thread pool."""

    def __init__(self, paths: list[str], labels: list[int], size: int, threads: int):
        from concurrent.futures import ThreadPoolExecutor

        self.paths, self.labels, self.size, self.threads = paths, np.asarray(labels, dtype=np.int64), size, threads
        self.pool = ThreadPoolExecutor(max_workers=max(1, threads))

    def __len__(self) -> int:
        return len(self.labels)

    def head(self, count: int) -> "FileSource":
        return FileSource(self.paths[:count], self.labels[:count].tolist(), self.size, self.threads)

    def _decode(self, path: str) -> np.ndarray:
        from PIL import Image

        with Image.open(path) as image:
            return np.asarray(image.convert("RGB").resize((self.size, self.size), Image.BILINEAR), dtype=np.uint8)

    def get(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        images = list(self.pool.map(self._decode, (self.paths[i] for i in indices)))
        return np.stack(images), self.labels[indices]


@dataclass
class LabelledData:
    """A train and a validation source, and how their pixels become the model's input."""

    name: str
    path: str
    train: ArraySource | FileSource
    val: ArraySource | FileSource
    classes: int
    native_size: int
    mean: tuple[float, ...]  # per channel, 0..1 scale
    std: tuple[float, ...]

    def preprocessing(self, image_size: int) -> str:
        size = fit(self.native_size, image_size)
        grey = " grey->RGB," if self.name == "fashion-mnist" else ""
        return f"{size} {self.native_size}->{image_size} px,{grey} normalised (mean {[round(m, 4) for m in self.mean]})"

    def prepare(self, images: np.ndarray, image_size: int) -> np.ndarray:
        """uint8 N x H x W x C -> float32 N x S x S x 3, normalised."""
        images = resize(images, image_size)
        if images.shape[-1] == 1:
            images = np.repeat(images, 3, axis=-1)
        return ((images.astype(np.float32) / 255.0) - np.float32(self.mean)) / np.float32(self.std)

    def as_dict(self, image_size: int) -> dict:
        return {"name": self.name, "path": self.path, "train_images": len(self.train), "val_images": len(self.val),
                "classes": self.classes, "preprocessing": self.preprocessing(image_size)}


def fit(native: int, target: int) -> str:
    """How a native-size image reaches the target size: as is, zero-padded, or resized."""
    if target == native:
        return "as is"
    return "zero-padded" if native < target <= native * PAD_LIMIT else "resized (nearest)"


def resize(images: np.ndarray, size: int) -> np.ndarray:
    native = images.shape[1]
    how = fit(native, size)
    if how == "as is":
        return images
    if how == "zero-padded":
        before = (size - native) // 2
        after = size - native - before
        return np.pad(images, ((0, 0), (before, after), (before, after), (0, 0)))
    index = np.arange(size) * native // size  # nearest neighbour: exact, vectorised, no library
    return images[:, index][:, :, index]


def fashion_mnist(directory: str | Path) -> LabelledData:
    root = check_fashion_mnist(directory)
    sources = {}
    for split, (images, labels) in FASHION_MNIST_FILES.items():
        pixels = read_idx(root / images)
        sources[split] = ArraySource(pixels[..., None], read_idx(root / labels))
    mean, std = FASHION_MNIST_STATS
    return LabelledData("fashion-mnist", str(root), sources["train"], sources["val"], FASHION_MNIST_CLASSES, 28,
                        (mean,) * 3, (std,) * 3)


def held_out(relative_path: str, fraction: float) -> bool:
    """A file's split by a hash of its path under the root: stable across seeds, runs and added files."""
    return zlib.crc32(relative_path.encode()) % 100_000 < fraction * 100_000


def split(root: str | Path, paths: list[str], labels: list[int], fraction: float, skip: frozenset = frozenset()
          ) -> tuple[tuple[list, list], tuple[list, list]]:
    """(train, validation) as (paths, labels) each, by held_out; a one-line UsageError when either is empty
    (asked before anything is built too: bench's checks call it with the scanned images)."""
    train, val = ([], []), ([], [])
    for path, label in zip(paths, labels):
        if path in skip:
            continue
        side = val if held_out(str(Path(path).relative_to(root)), fraction) else train
        side[0].append(path)
        side[1].append(label)
    if not val[0] or not train[0]:
        raise UsageError(f"--data-dir {str(root)!r}: --val-fraction {fraction:g} leaves {len(train[0])} training and "
                         f"{len(val[0])} validation images; both need at least one")
    return train, val


def image_folder_split(root: str | Path, fraction: float, image_size: int, threads: int,
                       skip: frozenset = frozenset()) -> LabelledData:
    from .dataset import image_folder

    paths, labels, classes = image_folder(root)
    train, val = split(root, paths, labels, fraction, skip)
    return LabelledData("imagefolder", str(root), FileSource(*train, image_size, threads),
                        FileSource(*val, image_size, threads), len(classes), image_size, IMAGENET_MEAN, IMAGENET_STD)


def load(config, skip: frozenset = frozenset()) -> LabelledData:
    """The run's labelled data: --data-dir (an ImageFolder with a held-out split) or Fashion-MNIST."""
    if config.data_dir:
        data = image_folder_split(config.data_dir, config.val_fraction, config.image_size, config.num_data_workers, skip)
    else:
        data = fashion_mnist(config.fashion_mnist_dir)
    if config.val_images is not None:
        data.val = data.val.head(config.val_images)
    return data


def shard(count: int, index: int, shards: int) -> np.ndarray:
    """Disjoint strided indices: every item in exactly one shard, none repeated (no padding)."""
    return np.arange(index, count, shards)


def train_batches(size: int, batch: int, rank: int, workers: int, seed: int) -> Iterator[np.ndarray]:
    """Endless index batches of one rank: each epoch one permutation (seeded, the same on every rank),
    dealt out in global batches of batch x workers, rank r taking slice r of each; the last partial
    global batch of an epoch is dropped so every rank takes the same number of steps."""
    global_batch = batch * workers
    if size < global_batch:
        raise UsageError(f"the training set has {size} images, fewer than one global batch ({batch} x {workers} workers)")
    epoch = 0
    while True:
        order = np.random.default_rng([seed, epoch]).permutation(size)
        for start in range(0, size - global_batch + 1, global_batch):
            yield order[start + rank * batch:start + (rank + 1) * batch]
        epoch += 1
