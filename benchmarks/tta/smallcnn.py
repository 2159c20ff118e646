"""The small BatchNorm CNN of time-to-accuracy runs (--model smallcnn), one definition for both
frameworks (docs/accuracy.md, "Models"): its initial weights are drawn here, with numpy, from --seed,
so torch and TensorFlow start from the same numbers. Layouts are canonical: convolution kernels
H x W x in x out, dense kernels in x out, with fc1's inputs in (channel, row, column) order.
"""

from __future__ import annotations

import numpy as np

CHANNELS = (32, 64)
HIDDEN = 128
BN_EPSILON = 1e-5
BN_MOMENTUM = 0.1  # torch's convention (new statistic's weight); Keras takes 1 - this


def feature_size(image_size: int) -> int:
    """Side of the map fc1 reads: two floor-halvings."""
    return image_size // 4


def initial_weights(seed: int, image_size: int, num_classes: int, in_channels: int = 3) -> dict[str, np.ndarray]:
    side = feature_size(image_size)
    if side < 1:
        raise ValueError(f"smallcnn needs images of at least 4 px (two 2x2 poolings), got {image_size}")
    rng = np.random.default_rng([seed, 0x5C22])

    def normal(shape, fan_in, gain):
        return (rng.standard_normal(shape) * np.sqrt(gain / fan_in)).astype(np.float32)

    c1, c2 = CHANNELS
    flat = c2 * side * side
    return {
        "conv1": normal((3, 3, in_channels, c1), 9 * in_channels, 2.0),
        "bn1_gamma": np.ones(c1, np.float32), "bn1_beta": np.zeros(c1, np.float32),
        "conv2": normal((3, 3, c1, c2), 9 * c1, 2.0),
        "bn2_gamma": np.ones(c2, np.float32), "bn2_beta": np.zeros(c2, np.float32),
        "fc1": normal((flat, HIDDEN), flat, 2.0), "fc1_bias": np.zeros(HIDDEN, np.float32),
        "fc2": normal((HIDDEN, num_classes), HIDDEN, 1.0), "fc2_bias": np.zeros(num_classes, np.float32),
    }


def fc1_channels_last(kernel: np.ndarray, image_size: int) -> np.ndarray:
    """fc1's kernel for inputs flattened in (row, column, channel) order (Keras, channels_last)."""
    side = feature_size(image_size)
    return kernel.reshape(CHANNELS[1], side, side, -1).transpose(1, 2, 0, 3).reshape(kernel.shape)
