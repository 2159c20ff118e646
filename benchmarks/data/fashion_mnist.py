"""Fashion-MNIST's facts, as Debian packages it: where its four IDX files are, what installs them, how many classes
and what pixel statistics. No import beyond this file: the option table (its --fashion-mnist-dir default and help)
reads them without loading the readers (labelled.py, which needs numpy)."""

from __future__ import annotations

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"  # where Debian's package installs its IDX files
FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"
FASHION_MNIST_CLASSES = 10
FASHION_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "val": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
FASHION_MNIST_STATS = (0.2860, 0.3530)  # pixel mean and std of its training images (0..1)
