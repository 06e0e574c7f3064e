"""MNIST: TensorFlow 1.x's tutorial reader, under ``towerflow.data``.

::

    from towerflow.data import mnist
    data = mnist.read_data_sets('MNIST_data', one_hot=True)
    images, labels = data.train.next_batch(100)

The same objects as ``towerflow.examples.tutorials.mnist.input_data``; see
there for the file names accepted and the errors raised.
"""

from ..examples.tutorials.mnist.input_data import (  # noqa: F401  (re-exported)
    DEFAULT_SOURCE_URL, DataSet, Datasets, dense_to_one_hot, extract_images, extract_labels,
    load_mnist, read_data_sets)

__all__ = ["read_data_sets", "load_mnist", "DataSet", "Datasets", "dense_to_one_hot",
           "extract_images", "extract_labels", "DEFAULT_SOURCE_URL"]
