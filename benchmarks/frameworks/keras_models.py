"""Keras models matching torchvision's, so both frameworks train the same network.

ResNets and InceptionV3 come from keras.applications (weights=None). Keras has
no AlexNet: `alexnet` below is torchvision's variant, the single-tower network
of Krizhevsky, "One weird trick for parallelizing convolutional neural
networks" (arXiv:1404.5997): 64-192-384-256-256 convolutions, no local
response normalisation, 6x6 adaptive pooling, two 4096-wide dropout layers.
InceptionV3 gets torchvision's auxiliary classifier on the Mixed_6e output
('mixed7' in Keras) when the input is large enough for it (299 px).
"""

from __future__ import annotations

import keras
from keras import layers

APPLICATIONS = {
    "resnet50": keras.applications.ResNet50,
    "resnet101": keras.applications.ResNet101,
    "resnet152": keras.applications.ResNet152,
    "inception3": keras.applications.InceptionV3,
}


def build(model: str, input_shape: tuple, num_classes: int, aux_head: bool, seed: int = 0) -> keras.Model:
    if model == "alexnet":
        return alexnet(input_shape, num_classes)
    if model == "smallcnn":
        return smallcnn(input_shape, num_classes, seed)
    net = APPLICATIONS[model](
        weights=None, input_shape=input_shape, classes=num_classes, classifier_activation=None
    )
    if model == "inception3" and aux_head:
        aux = inception_aux_head(net.get_layer("mixed7").output, num_classes)
        net = keras.Model(net.inputs, [net.outputs[0], aux], name="inception_v3_aux")
    return net


def _conv(x, filters, kernel, strides=1, padding="valid"):
    return layers.Conv2D(filters, kernel, strides=strides, padding=padding, activation="relu")(x)


def alexnet(input_shape: tuple, num_classes: int) -> keras.Model:
    inputs = keras.Input(input_shape)
    x = layers.ZeroPadding2D(2)(inputs)
    x = _conv(x, 64, 11, strides=4)
    x = layers.MaxPooling2D(3, strides=2)(x)
    x = _conv(x, 192, 5, padding="same")
    x = layers.MaxPooling2D(3, strides=2)(x)
    x = _conv(x, 384, 3, padding="same")
    x = _conv(x, 256, 3, padding="same")
    x = _conv(x, 256, 3, padding="same")
    x = layers.MaxPooling2D(3, strides=2)(x)
    x = AdaptiveAveragePooling((6, 6))(x)
    x = layers.Flatten()(x)
    x = layers.Dropout(0.5)(x)
    x = layers.Dense(4096, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    x = layers.Dense(4096, activation="relu")(x)
    outputs = layers.Dense(num_classes)(x)
    return keras.Model(inputs, outputs, name="alexnet")


def adaptive_bins(size_in: int, size_out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive pooling windows: [floor(i*n/m), ceil((i+1)*n/m)) -- may overlap or repeat."""
    return [(i * size_in // size_out, -(-(i + 1) * size_in // size_out)) for i in range(size_out)]


class AdaptiveAveragePooling(layers.Layer):
    """torch.nn.AdaptiveAvgPool2d semantics. Keras's own layer cannot upsample
    (a 1x1 map to 6x6, as AlexNet below 127 px needs); this one can."""

    def __init__(self, output_size: tuple[int, int], **kwargs):
        super().__init__(**kwargs)
        self.output_size = tuple(output_size)

    def call(self, inputs):
        first = keras.config.image_data_format() == "channels_first"
        axes = (2, 3) if first else (1, 2)
        x = inputs
        for axis, size_out in zip(axes, self.output_size):
            size_in = x.shape[axis]
            if size_in == size_out:
                continue
            pieces = []
            for start, stop in adaptive_bins(size_in, size_out):
                index = [slice(None)] * 4
                index[axis] = slice(start, stop)
                pieces.append(keras.ops.mean(x[tuple(index)], axis=axis, keepdims=True))
            x = keras.ops.concatenate(pieces, axis=axis)
        return x


def _conv_bn(x, filters, kernel):
    axis = 1 if keras.config.image_data_format() == "channels_first" else -1
    x = layers.Conv2D(filters, kernel, use_bias=False)(x)
    x = layers.BatchNormalization(axis=axis, epsilon=0.001)(x)
    return layers.Activation("relu")(x)


def inception_aux_head(features, num_classes: int):
    """torchvision's InceptionAux: 5x5/3 average pool, 1x1x128, 5x5x768, pool, linear."""
    x = layers.AveragePooling2D(5, strides=3)(features)
    x = _conv_bn(x, 128, 1)
    x = _conv_bn(x, 768, 5)
    x = layers.GlobalAveragePooling2D()(x)
    return layers.Dense(num_classes, name="aux_logits")(x)


def smallcnn(input_shape: tuple, num_classes: int, seed: int) -> keras.Model:
    """benchmarks/tta/smallcnn.py's network, with its seeded initial weights (the same numbers as torch's)."""
    from ..tta import smallcnn as spec

    first = keras.config.image_data_format() == "channels_first"
    axis = 1 if first else -1
    image_size = input_shape[-1] if first else input_shape[0]
    inputs = keras.Input(input_shape)
    x = inputs
    for index, filters in enumerate(spec.CHANNELS, start=1):
        x = layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"conv{index}")(x)
        x = layers.BatchNormalization(axis=axis, epsilon=spec.BN_EPSILON, momentum=1 - spec.BN_MOMENTUM, name=f"bn{index}")(x)
        x = layers.Activation("relu")(x)
        x = layers.MaxPooling2D(2)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(spec.HIDDEN, activation="relu", name="fc1")(x)
    outputs = layers.Dense(num_classes, name="fc2")(x)
    net = keras.Model(inputs, outputs, name="smallcnn")
    weights = spec.initial_weights(seed, image_size, num_classes)
    fc1 = weights["fc1"] if first else spec.fc1_channels_last(weights["fc1"], image_size)
    for index in (1, 2):
        net.get_layer(f"conv{index}").set_weights([weights[f"conv{index}"]])
        bn = net.get_layer(f"bn{index}")
        bn.set_weights([weights[f"bn{index}_gamma"], weights[f"bn{index}_beta"], *(w.numpy() for w in bn.weights[2:])])
    net.get_layer("fc1").set_weights([fc1, weights["fc1_bias"]])
    net.get_layer("fc2").set_weights([weights["fc2"], weights["fc2_bias"]])
    return net
