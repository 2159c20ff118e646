"""The models bench trains (the --model choices) and the input sizes each accepts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    default_image_size: int
    min_image_size: int  # smallest input both frameworks' architectures accept


# Minimum sizes were found by building each model in both frameworks
# (tests/test_models.py::test_models_train_at_minimum_image_size keeps them honest).
MODELS: dict[str, ModelSpec] = {
    "alexnet": ModelSpec(224, 63),
    "resnet50": ModelSpec(224, 32),
    "resnet101": ModelSpec(224, 32),
    "resnet152": ModelSpec(224, 32),
    "inception3": ModelSpec(299, 75),
    "smallcnn": ModelSpec(28, 4),  # benchmarks/tta/smallcnn.py: Fashion-MNIST's size; two 2x2 poolings
}
