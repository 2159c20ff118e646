"""The input data: ImageFolder trees (dataset.py) and the labelled data of time-to-accuracy runs (labelled.py,
Fashion-MNIST's facts in fashion_mnist.py)."""
